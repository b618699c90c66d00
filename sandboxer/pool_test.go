package sandboxer

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// A warm sandbox that reaches its age is replaced by a fresh one, and its cgroups are removed;
// closing the pool removes the rest.
func TestPoolRenewsAgedSandboxes(t *testing.T) {
	bermbin.RequireRoot(t)
	p, err := newPool(bermbin.Path(t, "berm-init"), 1, 400*time.Millisecond, slog.New(slog.DiscardHandler), "pool-test")
	if err != nil {
		t.Fatal(err)
	}
	first := waitWarm(t, p, "")
	second := waitWarm(t, p, first)
	// It is discarded in the background.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(first); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the aged sandbox's cgroup %s is still there", first)
		}
	}
	p.Close()
	if _, err := os.Stat(second); !os.IsNotExist(err) {
		t.Fatalf("Close left the warm sandbox's cgroup %s (%v)", second, err)
	}
}

// waitWarm waits for a warm sandbox of the pool's tenant other than not, and returns its cgroup.
func waitWarm(t *testing.T, p *Pool, not string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		ws := p.idle["pool-test"]
		dir := ""
		if len(ws) == 1 {
			dir = ws[0].s.cg.V2
		}
		p.mu.Unlock()
		if dir != "" && dir != not {
			return dir
		}
	}
	t.Fatalf("no warm sandbox other than %q", not)
	return ""
}
