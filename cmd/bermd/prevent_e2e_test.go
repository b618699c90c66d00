package main

import (
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/hostile"
)

// Through bermd, in a warm sandbox, a tool that makes FIFOs, unix sockets, device nodes and
// setuid or setgid files by every path we know is refused each time when it makes them, each
// refusal a denial in bermd's journal, and nothing of it is left in the workspace.
func TestDaemonRefusesSpecialFilesAndSetidWhenMade(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	d.settled(t)
	r := d.run(t, "", "--call-id", "bermd-hostile", "--workspace", ws, "--", "python3", "-c", hostile.SpecialFiles)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	hostile.CheckSpecialFiles(t, r.Stdout, bermbin.Timeline(t, d.state, "bermd-hostile").Events, ws)
}
