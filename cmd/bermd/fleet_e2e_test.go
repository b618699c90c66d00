package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
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
// name, ship to one ClickHouse. Each call is there once, under the node that ran it, and
// berm events --source clickhouse --host gives one node's events and none of the other's.
func TestTwoNodesShipToOneClickHouseEachCallOnceUnderItsNode(t *testing.T) {
	bermbin.RequireRoot(t)
	ch := chtest.ForTest(t, chtest.Config{})
	dsn := ch.DSN("berm")
	const tenant = "fleettest"
	nodes := map[string]*bermd{}
	for _, name := range []string{"fleettest-node-a", "fleettest-node-b"} {
		nodes[name] = startDaemon(t, "--node", name, "--clickhouse", dsn)
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
