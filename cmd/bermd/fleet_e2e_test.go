package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// chQuery runs a query over ClickHouse's HTTP interface and gives its TabSeparated rows.
func chQuery(t *testing.T, ch *chtest.Server, q string) [][]string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/?query=%s", ch.HTTPPort, url.QueryEscape(q+" FORMAT TabSeparated")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil // a table not made yet: the caller waits
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			rows = append(rows, strings.Split(line, "\t"))
		}
	}
	return rows
}

// A fleet on one machine: two bermd "nodes", each its own state dir, socket, journal and node
// name, ship to a two-shard ClickHouse cluster, each node to its own shard through the
// Distributed tables (sharded by call id; bermd --clickhouse-cluster makes its shard's tables
// in that layout, the test none). Each call is there once, on one shard, under the
// node that ran it; berm calls --source and berm matrix --source (the datasource's matrix
// query, query.Matrix, over the Distributed tables) count each call once; berm events --source
// clickhouse --host gives one node's events and none of the other's.
func TestTwoNodesShipToATwoShardClusterEachCallOnceUnderItsNode(t *testing.T) {
	bermbin.RequireRoot(t)
	var ports [2]int
	for i := range ports {
		p, err := chtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	shards := []chtest.Shard{{Host: "127.0.0.1", Port: ports[0]}, {Host: "127.0.0.1", Port: ports[1]}}
	var servers [2]*chtest.Server
	for i := range servers {
		servers[i] = chtest.ForTest(t, chtest.Config{TCPPort: ports[i], Clusters: map[string][]chtest.Shard{"berm": shards}})
	}
	ch, dsn := servers[0], servers[0].DSN("berm")
	const tenant = "fleettest"
	nodes := map[string]*bermd{}
	for i, name := range []string{"fleettest-node-a", "fleettest-node-b"} {
		nodes[name] = startDaemon(t, "--node", name, "--clickhouse", servers[i].DSN("berm"), "--clickhouse-cluster", "berm")
	}
	want := map[string]string{} // call id -> node
	for name, d := range nodes {
		for i := 0; i < 2; i++ {
			id := fmt.Sprintf("%s-%d", name, i)
			r := d.run(t, "", "--call-id", id, "--tenant", tenant, "--tool", "shell", "--", "/bin/sh", "-c", "cat /etc/hostname >/dev/null; echo ran")
			if r.Exit != 0 || !strings.Contains(r.Stdout, "ran") {
				t.Fatalf("call %s on %s: exit %d\nstdout: %s\nstderr: %s", id, name, r.Exit, r.Stdout, r.Stderr)
			}
			if c := d.call(t, id); c.Start.Node != name {
				t.Errorf("call %s in %s's journal: node %q, want %q", id, name, c.Start.Node, name)
			}
			want[id] = name
		}
	}
	// every call's record shipped, each once (FINAL: the engine's dedup is not what is tested)
	var rows [][]string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		rows = chQuery(t, ch, "SELECT call_id, node, count() FROM berm.calls WHERE tenant = '"+tenant+"' GROUP BY call_id, node ORDER BY call_id")
		if len(rows) >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse holds %d of the %d calls after 2 minutes: %v", len(rows), len(want), rows)
		}
	}
	got := map[string]string{}
	for _, r := range rows {
		if r[2] != "1" {
			t.Errorf("call %s of %s stored %s times, want once", r[0], r[1], r[2])
		}
		if prev, dup := got[r[0]]; dup {
			t.Errorf("call %s stored under two nodes: %s and %s", r[0], prev, r[1])
		}
		got[r[0]] = r[1]
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls by node in ClickHouse %v, want %v", got, want)
	}
	// the calls are spread over both shards, each on one (a call's rows stay on its shard)
	var sum int
	for i, s := range servers {
		local := chQuery(t, s, "SELECT count() FROM berm.calls_local FINAL WHERE tenant = '"+tenant+"'")
		n := 0
		if len(local) == 1 {
			n, _ = strconv.Atoi(local[0][0])
		}
		t.Logf("shard %d holds %d of the calls", i+1, n)
		sum += n
	}
	if sum != len(want) {
		t.Errorf("the shards hold %d calls together, want %d (each on one shard)", sum, len(want))
	}
	// berm matrix --source: the datasource's matrix query over the Distributed tables counts
	// both nodes' calls, each once
	mr := bermbin.Berm(t, nil, "matrix", "--source", dsn, "--tenant", tenant, "--json")
	if mr.Exit != 0 {
		t.Fatalf("berm matrix --source: exit %d: %s", mr.Exit, mr.Stderr)
	}
	var m audit.Matrix
	if err := json.Unmarshal([]byte(mr.Stdout), &m); err != nil {
		t.Fatalf("berm matrix --json: %v\n%s", err, mr.Stdout)
	}
	if len(m.Tools) != 1 || m.Tools[0].Tool != "shell" || m.Tools[0].Calls != uint64(len(want)) {
		t.Errorf("matrix over the cluster: %+v, want tool shell with %d calls", m.Tools, len(want))
	}
	for _, tool := range m.Tools {
		for _, c := range tool.Cells {
			if c.Calls > tool.Calls {
				t.Errorf("matrix cell %s/%s counts %d calls of the tool's %d", tool.Tool, c.Surface, c.Calls, tool.Calls)
			}
		}
	}
	// berm calls --source reads the fleet's calls: each once, under its node
	r := bermbin.Berm(t, nil, "calls", "--source", dsn, "--json")
	if r.Exit != 0 {
		t.Fatalf("berm calls --source: exit %d: %s", r.Exit, r.Stderr)
	}
	var listed []audit.Call
	if err := json.Unmarshal([]byte(r.Stdout), &listed); err != nil {
		t.Fatalf("berm calls --json: %v\n%s", err, r.Stdout)
	}
	seen := map[string]int{}
	for _, c := range listed {
		if c.Start.Tenant != tenant {
			continue
		}
		seen[c.Start.CallID]++
		if want[c.Start.CallID] != c.Start.Node {
			t.Errorf("berm calls --source: call %s under node %q, want %q", c.Start.CallID, c.Start.Node, want[c.Start.CallID])
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("berm calls --source lists call %s %d times, want once", id, seen[id])
		}
	}
	// the events are shipped after their call's start; wait for each call's exec
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		rows = chQuery(t, ch, "SELECT DISTINCT call_id FROM berm.events WHERE tenant = '"+tenant+"' AND kind = 'exec'")
		if len(rows) >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse holds the execs of %d of the %d calls after 2 minutes", len(rows), len(want))
		}
	}
	for name := range nodes {
		r := bermbin.Berm(t, nil, "events", "--source", dsn, "--tenant", tenant, "--host", name, "--kind", "exec")
		if r.Exit != 0 {
			t.Fatalf("berm events --host %s: exit %d: %s", name, r.Exit, r.Stderr)
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(r.Stdout))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e event.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("berm events line %q: %v", sc.Text(), err)
			}
			if want[e.CallID] != name {
				t.Errorf("berm events --host %s gave an event of call %s (node %q)", name, e.CallID, want[e.CallID])
			}
			seen[e.CallID] = true
		}
		var calls []string
		for id := range seen {
			calls = append(calls, id)
		}
		sort.Strings(calls)
		if want := []string{name + "-0", name + "-1"}; fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Errorf("berm events --host %s: execs of calls %v, want %v", name, calls, want)
		}
	}
}
