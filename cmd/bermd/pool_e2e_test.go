package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/promscrape"
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

// waitWarmFor waits until bermd has a warm sandbox ready for tenant.
func (d *bermd) waitWarmFor(t *testing.T, tenant string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := promscrape.Labelled(d.metrics, "berm_sandboxes_warm_by_tenant", "tenant", tenant)
		if err == nil && v >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm sandbox for tenant %s after 60 s (%v)", tenant, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A tenant that floods bermd with calls exhausts its warm sandboxes, its own bound and the
// node's, and launches cold; its neighbour's calls meanwhile are each launched warm: the
// neighbour's floor is its own, whatever the flood takes. (Each of the neighbour's calls is
// made once its warm sandbox is ready: what is counted is which sandbox the call got, not
// how fast the refill was.)
func TestDaemonFloodingTenantLeavesItsNeighbourWarm(t *testing.T) {
	d := startDaemon(t, "--warm", "1", "--warm-max-tenant", "3", "--warm-max", "3", "--log-level", "debug")
	d.settled(t)
	ws := bermbin.Workspace(t)
	call := func(tenant, id string) error {
		out, err := exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--tenant", tenant, "--call-id", id, "--workspace", ws, "--", "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("call %s of %s: %v: %s", id, tenant, err, out)
		}
		return nil
	}
	// The neighbour's first call makes it known to the pool (cold: nothing was warm for it).
	if err := call("neighbour", "first"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var floodErr atomic.Pointer[error]
	var floodCalls atomic.Int64
	const callers = 6
	for c := range callers {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := call("flood", fmt.Sprintf("flood-%d-%d", c, i)); err != nil {
					floodErr.CompareAndSwap(nil, &err)
					return
				}
				floodCalls.Add(1)
			}
		}()
	}
	// The flood is on: each of its callers has had a call.
	for floodCalls.Load() < callers && floodErr.Load() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	const n = 10
	for i := range n {
		d.waitWarmFor(t, "neighbour")
		if err := call("neighbour", fmt.Sprintf("neighbour-%d", i)); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	flood.Wait()
	if err := floodErr.Load(); err != nil {
		t.Fatal(*err)
	}
	d.cmd.Process.Signal(os.Interrupt)
	_ = d.cmd.Wait()
	var warm, cold, floodWarm, floodCold int
	for _, line := range strings.Split(d.log.String(), "\n") {
		if !strings.Contains(line, `msg="call served"`) {
			continue
		}
		switch {
		case strings.Contains(line, "call_id=neighbour-") && strings.Contains(line, "sandbox=warm"):
			warm++
		case strings.Contains(line, "call_id=neighbour-"):
			cold++
		case strings.Contains(line, "call_id=flood-") && strings.Contains(line, "sandbox=warm"):
			floodWarm++
		case strings.Contains(line, "call_id=flood-"):
			floodCold++
		}
	}
	t.Logf("beside %d callers of a flood (%d calls: %d warm, %d cold), the neighbour's %d calls: %d warm, %d cold", callers, floodWarm+floodCold, floodWarm, floodCold, n, warm, cold)
	if floodCold == 0 {
		t.Fatalf("the flood's %d calls were all warm: it never exhausted its warm sandboxes, the test shows nothing", floodWarm)
	}
	if warm != n || cold != 0 {
		t.Fatalf("the neighbour's %d calls beside the flood: %d warm, %d cold: want every one warm", n, warm, cold)
	}
}
