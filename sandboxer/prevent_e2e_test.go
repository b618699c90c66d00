package sandboxer_test

import (
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/hostile"
)

// A tool that makes FIFOs, unix sockets, device nodes and setuid or setgid files, by every
// path we know, is refused each time when it makes them (the syscall fails), each refusal a
// denial with its layer and rule, and nothing of it is in the workspace after the call: no
// walk of the workspace after the call is needed.
func TestHostileToolIsRefusedSpecialFilesAndSetidWhenMade(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	r := run(t, state, "--call-id", "hostile", "--workspace", ws, "--", "python3", "-c", hostile.SpecialFiles)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	hostile.CheckSpecialFiles(t, r.Stdout, bermbin.Timeline(t, state, "hostile").Events, ws)
}
