package main

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// waitSettled waits until bermd starts no sandbox.
func (d *bermd) waitSettled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for d.metric(t, "berm_sandboxes_starting") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("bermd is still starting sandboxes after 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A burst of one tenant grows its warm sandboxes, within its bound, and its neighbour keeps
// its own: the neighbour's next call is warm. Then the grown tenant's back-to-back calls find
// warm sandboxes (the pool's first design served every other one cold: at most half).
func TestDaemonPoolFollowsDemandWithinBounds(t *testing.T) {
	d := startDaemon(t, "--warm", "1", "--warm-max-tenant", "4", "--warm-max", "6")
	d.settled(t)
	ws := bermbin.Workspace(t)
	call := func(tenant, id string) *exec.Cmd {
		return exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--tenant", tenant, "--call-id", id, "--workspace", ws, "--", "true")
	}
	// The burst: 10 concurrent calls of "hog".
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := call("hog", fmt.Sprintf("burst-%d", i)).CombinedOutput(); err != nil {
				t.Errorf("burst call %d: %v: %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	d.waitSettled(t)
	if warm := d.metric(t, "berm_sandboxes_warm"); warm < 3 || warm > 5 {
		t.Fatalf("after the burst %v sandboxes are warm: want default's 1 and hog's grown past 1, within its bound of 4", warm)
	}
	warm0, cold0 := d.metric(t, "berm_sandbox_launches_warm_total"), d.metric(t, "berm_sandbox_launches_cold_total")
	if out, err := call("default", "pool-neighbour").CombinedOutput(); err != nil {
		t.Fatalf("neighbour: %v: %s", err, out)
	}
	if w, c := d.metric(t, "berm_sandbox_launches_warm_total")-warm0, d.metric(t, "berm_sandbox_launches_cold_total")-cold0; w != 1 || c != 0 {
		t.Fatalf("the neighbour's call after the burst: %v warm, %v cold: want warm", w, c)
	}
	d.waitSettled(t)
	warm0, cold0 = d.metric(t, "berm_sandbox_launches_warm_total"), d.metric(t, "berm_sandbox_launches_cold_total")
	const n = 40
	for i := range n {
		if out, err := call("hog", fmt.Sprintf("b2b-%d", i)).CombinedOutput(); err != nil {
			t.Fatalf("back-to-back call %d: %v: %s", i, err, out)
		}
	}
	w, c := d.metric(t, "berm_sandbox_launches_warm_total")-warm0, d.metric(t, "berm_sandbox_launches_cold_total")-cold0
	t.Logf("%d back-to-back calls: %v warm, %v cold", n, w, c)
	if w+c != n || w < 0.75*n {
		t.Fatalf("%d back-to-back calls: %v warm, %v cold: want three quarters warm at least (make bench measures the share)", n, w, c)
	}
}
