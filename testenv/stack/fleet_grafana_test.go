package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// A fleet as on-call sees it: two bermd nodes, each shipping to its own shard of a two-shard
// ClickHouse cluster (bermd --clickhouse-cluster: the Distributed tables), and Grafana's
// tools × surfaces matrix, through berm's datasource on one shard, counts both nodes' calls,
// each once.
func TestAFleetOnATwoShardClusterIsOneMatrixInGrafana(t *testing.T) {
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
	var dsns [2]string
	for i := range dsns {
		dsns[i] = chtest.ForTest(t, chtest.Config{TCPPort: ports[i], Clusters: map[string][]chtest.Shard{"berm": shards}}).DSN("berm")
	}
	const tenant, tool = "fleetgrafana", "TestAFleetOnATwoShardCluster-tool"
	calls := 0
	for i, node := range []string{"fleetgrafana-node-a", "fleetgrafana-node-b"} {
		d := bermbin.StartDaemon(t, "--node", node, "--clickhouse", dsns[i], "--clickhouse-cluster", "berm")
		for j := 0; j < 2; j++ {
			id := fmt.Sprintf("%s-%d", node, j)
			r := bermbin.Berm(t, nil, "run", "--socket", d.Socket, "--daemon", "required", "--call-id", id, "--tenant", tenant, "--tool", tool, "--", "/bin/cat", "/etc/hostname")
			if r.Exit != 0 {
				t.Fatalf("call %s on %s: exit %d\n%s", id, node, r.Exit, r.Stderr)
			}
			calls++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := startGrafana(ctx, stackBin(t), t.TempDir(), dsns[0], "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	in := Info{Grafana: g.URL(), GrafanaUser: g.User, GrafanaPass: g.Password}
	var tools []string
	var n []float64
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		n = nil
		tools, err = matrixTools(in, tenant, &n)
		if err == nil && slices.Contains(tools, tool) && len(n) == len(tools) && n[slices.Index(tools, tool)] >= float64(calls) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Grafana's matrix of the fleet after 2 minutes: tools %v, calls %v, err %v; want %s with %d calls", tools, n, err, tool, calls)
		}
	}
	if len(tools) != 1 || n[0] != float64(calls) {
		t.Errorf("Grafana's matrix of the fleet: tools %v with calls %v, want only %s with %d (each call once)", tools, n, tool, calls)
	}
}
