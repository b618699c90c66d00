package sandboxer

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
	"github.com/bermsec/berm/testenv/bermbin"
)

// A call handed to its init held (deliver's hold, while the launcher registers it with the
// agent) starts nothing of the tool until released: a launcher that goes away instead (its
// registration failed, it crashed) leaves an init that gives up, the tool never run.
func TestHeldInitRunsNoToolWithoutRelease(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, release := range []bool{true, false} {
		name := map[bool]string{true: "released", false: "never released"}[release]
		t.Run(name, func(t *testing.T) { heldCall(t, release) })
	}
}

func heldCall(t *testing.T, release bool) {
	ws := bermbin.Workspace(t)
	wsDir, err := openWorkspaceDir(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wsDir.Close()
	marker := filepath.Join(wsDir.Path, "tool-ran")
	spec := Spec{CallID: "held-1", Tool: "t", Tenant: "hold-test", Workspace: wsDir.Path, Policy: policy.Strict(),
		Argv: []string{"/bin/sh", "-c", "echo ran > " + marker}, Limits: policy.StrictLimits()}
	env, err := compile(&spec)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := hostLayout()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := startSandbox(layout, bermbin.Path(t, "berm-init"), spec.Tenant, spec.CallID,
		cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, CPUs: spec.Limits.CPUs}, env.init.NewNet, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.discard()
	tree, err := idmappedTree(wsDir, sb, env.wsNoExec)
	if err != nil {
		t.Fatal(err)
	}
	l := &launch{spec: spec, cg: sb.cg, env: env}
	d, res := l.deliver(sb, tree, true)
	if res != nil {
		t.Fatalf("deliver: %+v", res)
	}
	defer d.close()
	// Time for a tool that would start unreleased to run (a test of absence: no timing is
	// asserted, a slow machine only makes it weaker).
	time.Sleep(300 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tool ran before the launcher released the call")
	}
	if pop, err := cgroup.Populated(sb.cg.V2); err != nil || !pop {
		t.Fatalf("the held init is gone before its release (populated %v, %v)", pop, err)
	}
	if release {
		if err := sb.release(); err != nil {
			t.Fatal(err)
		}
	} else {
		// The launcher lets go without a release: the init's channel closes.
		d.sb.cfg, _ = -1, closeFD(d.sb.cfg)
	}
	waitErr := sb.cmd.Wait()
	sb.cmd = nil
	var st sandboxinit.Status
	data, _ := io.ReadAll(sb.stat)
	jsonErr := json.Unmarshal(data, &st)
	_, statErr := os.Stat(marker)
	if release {
		if waitErr != nil || jsonErr != nil || !st.Started || !st.Exited || st.Code != 0 || statErr != nil {
			t.Fatalf("released: init %v, status %q, marker %v: want the tool run", waitErr, data, statErr)
		}
		return
	}
	if waitErr == nil {
		t.Error("the init exited 0 without a call")
	}
	if jsonErr != nil || st.Started || !strings.Contains(st.Error, "did not let the tool start") {
		t.Errorf("init status %q (%v): want a set-up failure, the tool not started", data, jsonErr)
	}
	if statErr == nil {
		t.Error("the tool ran without a release")
	}
}

func closeFD(fd int) error { return os.NewFile(uintptr(fd), "cfg").Close() }
