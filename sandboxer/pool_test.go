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

func TestPoolTargetFollowsDemand(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		target, size, claims int
		want                 int
	}{
		{"a quiet tenant keeps its size", 1, 1, 0, 1},
		{"a grown tenant that claimed less than it kept loses one", 5, 1, 2, 4},
		{"a grown tenant that used what it kept keeps it", 5, 1, 5, 5},
		{"never under size", 2, 2, 0, 2},
		{"a new tenant starts at size", 0, 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextTarget(tc.target, tc.size, tc.claims); got != tc.want {
				t.Fatalf("nextTarget(%d, %d, %d) = %d, want %d", tc.target, tc.size, tc.claims, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name                    string
		target, size, perTenant int
		want                    int
	}{
		{"a miss grows by one", 1, 1, 8, 2},
		{"up to the tenant's bound", 8, 1, 8, 8},
		{"from size when it had none", 0, 2, 8, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := grow(tc.target, tc.size, tc.perTenant); got != tc.want {
				t.Fatalf("grow(%d, %d, %d) = %d, want %d", tc.target, tc.size, tc.perTenant, got, tc.want)
			}
		})
	}
}
