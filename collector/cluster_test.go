package collector

import (
	"context"
	"log/slog"
	"testing"
	"time"

	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// TestCluster runs two servers on loopback as the two shards of cluster "berm", applies the
// sharded schema on both, ships through the Distributed tables of the first and checks that
// rows land on both shards, each call whole on one, and read back whole.
func TestCluster(t *testing.T) {
	var ports [2]int
	for i := range ports {
		p, err := chtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	shards := []chtest.Shard{{Host: "127.0.0.1", Port: ports[0]}, {Host: "127.0.0.1", Port: ports[1]}}
	var nodes [2]*chtest.Server
	for i := range nodes {
		nodes[i] = chtest.ForTest(t, chtest.Config{TCPPort: ports[i], Clusters: map[string][]chtest.Shard{"berm": shards}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := MigrateDSN(ctx, n.DSN("default"), "berm", 0, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	ids := writeCalls(t, state, "shard", 12, 300, 100, true)
	c, _ := newCollector(t, state, nodes[0].DSN("default"), func(c *Config) { c.Cluster = "berm" })
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	total := uint64(len(ids) * 300)
	var sum uint64
	for i, n := range nodes {
		conn := connect(t, n.DSN("default"))
		local := count(t, conn, "SELECT count() FROM default.events_local")
		calls := count(t, conn, "SELECT count() FROM default.calls_local")
		t.Logf("shard %d: %d events, %d calls", i+1, local, calls)
		if local == 0 || calls == 0 {
			t.Errorf("shard %d got no rows", i+1)
		}
		if local != calls*300 {
			t.Errorf("shard %d: %d events for %d calls: calls are split across shards", i+1, local, calls)
		}
		sum += local
	}
	if sum != total {
		t.Fatalf("shards hold %d events, want %d", sum, total)
	}
	exactlyOnce(t, connect(t, nodes[0].DSN("default")), "default", state)
	sameAsJournal(t, state, nodes[0].DSN("default"), len(ids))
}
