package sandboxer_test

import (
	"fmt"
	"strings"
	"testing"

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
