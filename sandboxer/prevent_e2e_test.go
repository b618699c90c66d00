package sandboxer_test

import (
	"strings"
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
	r := run(t, state, "--daemon", "never", "--call-id", "hostile", "--workspace", ws, "--", "python3", "-c", hostile.SpecialFiles)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	hostile.CheckSpecialFiles(t, r.Stdout, bermbin.Timeline(t, state, "hostile").Events, ws)
}

// What ordinary tools do in a workspace makes no special file and no set-id mode: under the
// strict policy they work, and nothing of theirs is refused as one.
func TestOrdinaryToolsWorkUnderStrict(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	script := `set -e
mkdir -p src/a/b && echo hi > src/a/b/f && chmod 755 src/a/b/f && mkdir -m 755 src/c
tar cf t.tar src && mkdir x && tar xf t.tar -C x
cp -a src copy
git init -q repo
python3 -m venv venv
mkdir d && chmod 755 d && chmod -R u+w src
test -x venv/bin/python`
	r := run(t, state, "--call-id", "ordinary", "--workspace", ws, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	for _, e := range bermbin.Timeline(t, state, "ordinary").Events {
		if d := e.Denial; d != nil && (strings.Contains(d.Rule, "make_") || strings.Contains(d.Rule, "setuid")) {
			t.Errorf("refused: %s | %s | %s", d.Layer, d.Rule, d.Object)
		}
	}
}
