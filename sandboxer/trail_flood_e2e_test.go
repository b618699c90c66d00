package sandboxer_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The hostile tool blinding its own trail: a chain of workspace symlinks deeper than the
// kernel follows, and tens of thousands of cheap failed opens through it (each fails at once
// in the kernel with ELOOP), then what it wanted unseen: a read of a readable host file, the
// deletion of a workspace file and an exec of id.
const stallScript = `import os
open("victim", "w").close()
for i in range(60):
    os.symlink("l%d" % (i + 1), "l%d" % i)
for i in range(OPENS):
    try:
        open("l0/f%d" % i)
    except OSError:
        pass
open("/etc/passwd").read()
os.unlink("victim")
os.execv("/usr/bin/id", ["id"])
`

// Whatever the tool does first, the per-event cost of its trail is bounded: the read, the
// deletion and the exec that follow a flood of failed opens through a symlink chain are all
// in the trail, and the record's drop count is what the trail lacks.
func TestSymlinkChainFloodDoesNotBlindTheTrail(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	const opens = 20000
	r := run(t, state, "--call-id", "stall", "--workspace", ws, "--", "python3", "-c", strings.ReplaceAll(stallScript, "OPENS", fmt.Sprint(opens)))
	if r.Exit != 0 || !strings.Contains(r.Stdout, "uid=") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "stall")
	var failedOpens uint64
	var read, unlink, exec bool
	for _, e := range tl.Events {
		switch {
		case e.Open != nil && strings.Contains(e.Open.Path, "l0/f") && e.Open.Result < 0:
			failedOpens++
		case e.Open != nil && e.Open.Path == "/etc/passwd" && e.Open.Result >= 0:
			read = true
		case e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.HasSuffix(e.Syscall.Path, "victim") && e.Syscall.Result == 0:
			unlink = true
		case e.Exec != nil && e.Exec.Filename == "/usr/bin/id":
			exec = true
		case e.Aggregate != nil && e.Aggregate.Kind == event.KindOpen && strings.Contains(e.Aggregate.Object, "l0/f"):
			failedOpens += e.Aggregate.Count
		}
	}
	rec := tl.Call.Record
	if rec == nil {
		t.Fatal("the call has no record")
	}
	d := rec.Dropped
	t.Logf("%d failed opens recorded of %d; dropped %d in the kernel, %d in the agent; complete %v %s",
		failedOpens, opens, d.Kernel, d.User, rec.Complete, rec.IncompleteReason)
	if !read || !unlink || !exec {
		t.Errorf("after the flood: read of /etc/passwd %v, unlink of victim %v, exec of id %v", read, unlink, exec)
	}
	// Honest: every failed open is recorded (one by one or aggregated) or counted as dropped.
	if failedOpens+d.Kernel+d.User < opens {
		t.Errorf("%d failed opens recorded and %d events dropped: fewer than the %d made", failedOpens, d.Kernel+d.User, opens)
	}
	if (d.Kernel+d.User > 0) == rec.Complete {
		t.Errorf("%d events dropped, yet the record says complete %v", d.Kernel+d.User, rec.Complete)
	}
}

// ringFloodScript waits for the test to stop berm's reader, then floods the kernel's ring with
// failed opens of long paths (noise: each a record of about 4 KiB, the call's share of the
// ring many times over), then does what it wants unseen: a read of a file the policy denies
// (readable on the host), the deletion of a workspace file and an exec of id.
const ringFloodScript = `import os, subprocess, sys, time
os.chdir("work")
open("victim", "w").close()
open("ready", "w").close()
while not os.path.exists("go"):
    time.sleep(0.01)
name = "/nx/" + "/".join(["a" * 250] * 15)
for i in range(int(sys.argv[1])):
    try:
        open(name)
    except OSError:
        pass
try:
    open("../vault/secret").read()
except PermissionError:
    pass
os.unlink("victim")
subprocess.run(["/usr/bin/id"], stdout=subprocess.DEVNULL)
open("done", "w").close()
`

// A tool that fills the kernel's ring with noise while berm's reader is stopped (SIGSTOP of
// the embedded agent: deterministic, nothing timed) still leaves its next actions in the
// trail: the kernel keeps the ring's last quarter for vital records, drops the noise past it
// and counts it as noise. The denied read, the deletion and the exec are all there; the
// record says how many noise records were dropped, and that no vital one was.
func TestAFloodOfNoiseInTheRingDoesNotBlindTheTrail(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	// The policy denies vault/ (readable on the host); the tool works in work/ (a sibling of a
	// denied tree is granted whole, the workspace's own entries are not).
	for _, d := range []string{"vault", "work"} {
		os.Mkdir(filepath.Join(ws, d), 0o755)
		os.Lchown(filepath.Join(ws, d), 65534, 65534)
	}
	for name, body := range map[string]string{"tool.py": ringFloodScript, "vault/secret": "the host's secret\n"} {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Lchown(p, 65534, 65534)
	}
	pol := filepath.Join(t.TempDir(), "deny.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: flood}
spec:
  filesystem:
    deny: ["${WORKSPACE}/vault"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// 12000 records of ~4 KiB: three times the default 16 MiB ring.
	const opens = 12000
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--call-id", "blind",
		"--workspace", ws, "--policy", pol, "--", "python3", "tool.py", fmt.Sprint(opens))
	done := bermbin.Start(t, cmd)
	waitFor := func(marker string) {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(ws, "work", marker)); err == nil {
				return
			}
			select {
			case r := <-done:
				t.Fatalf("the call ended before the tool made %s: exit %d\nstdout: %s\nstderr: %s", marker, r.Exit, r.Stdout, r.Stderr)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tool did not make %s in two minutes", marker)
			}
		}
	}
	waitFor("ready")
	// berm run is the embedded agent: stopped, its ring reader reads nothing while the tool
	// floods. It is continued whatever happens, before the test's end kills it.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			cmd.Process.Signal(syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(resume)
	if err := os.WriteFile(filepath.Join(ws, "work", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("done")
	resume()
	r := <-done
	if r.Exit != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "blind")
	var failedOpens uint64
	var denied, unlink, execID bool
	for _, e := range tl.Events {
		switch {
		case e.Open != nil && strings.HasPrefix(e.Open.Path, "/nx/") && e.Open.Result < 0:
			failedOpens++
		case e.Aggregate != nil && e.Aggregate.Kind == event.KindOpen && strings.HasPrefix(e.Aggregate.Object, "/nx/"):
			failedOpens += e.Aggregate.Count
		case e.Denial != nil && e.Denial.Object == filepath.Join(ws, "vault", "secret"):
			denied = true
		case e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.HasSuffix(e.Syscall.Path, "victim") && e.Syscall.Result == 0:
			unlink = true
		case e.Exec != nil && e.Exec.Filename == "/usr/bin/id":
			execID = true
		}
	}
	rec := tl.Call.Record
	if rec == nil {
		t.Fatal("the call has no record")
	}
	d := rec.Dropped
	t.Logf("%d failed opens recorded of %d; dropped in the kernel %d (noise %d), in the agent %d (noise %d); complete %v: %s",
		failedOpens, opens, d.Kernel, d.KernelNoise, d.User, d.UserNoise, rec.Complete, rec.IncompleteReason)
	if !denied || !unlink || !execID {
		t.Errorf("after the flood: the denied read %v, the deletion of victim %v, the exec of id %v", denied, unlink, execID)
	}
	if d.KernelNoise == 0 {
		t.Errorf("the flood filled the ring, yet the record counts no noise dropped in the kernel: %+v", d)
	}
	if d.Kernel != d.KernelNoise {
		t.Errorf("%d vital records lost in the kernel (of %d dropped): the ring's last quarter is theirs", d.Kernel-d.KernelNoise, d.Kernel)
	}
	// Honest: every failed open is recorded (one by one or aggregated) or counted as dropped.
	if failedOpens+d.Kernel+d.User < opens {
		t.Errorf("%d failed opens recorded and %d events dropped: fewer than the %d made", failedOpens, d.Kernel+d.User, opens)
	}
	if rec.Complete {
		t.Errorf("%d events dropped, yet the record says complete", d.Kernel+d.User)
	}
}
