package collector

import (
	"context"
	"errors"
	"os/exec"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/testutil"
)

// TestShipRealCall runs a real tool call with berm run (traced, sandboxed: needs root), ships
// its journal and reads it back: the same call and timeline as from the local journal.
func TestShipRealCall(t *testing.T) {
	testutil.RequireRoot(t, "berm run creates cgroups and namespaces and loads eBPF")
	s := server(t)
	dsn := freshDB(t, s)
	bin := bermbin.Path(t, "berm")
	state := t.TempDir()
	out, err := exec.Command(bin, "run", "--state-dir", state, "--tool", "shell", "--tenant", "acme", "--",
		"/bin/sh", "-c", "echo hello; cat /etc/hostname; ls /tmp; true").CombinedOutput()
	// The tool's own exit status does not matter here (the sandbox may refuse some of what
	// it does); berm failing to run it does.
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() >= 125) {
		t.Fatalf("berm run: %v\n%s", err, out)
	}
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if n := count(t, conn, "SELECT count() FROM "+c.db+".events"); n == 0 {
		t.Fatal("the call's events did not reach clickhouse")
	}
	exactlyOnce(t, conn, c.db, state)
	sameAsJournal(t, state, dsn, 1)
}
