package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// Two bermds with their own control sockets share the approvals directory: each serves its
// own approval socket. The second's exit takes nothing of the first's: a request the first
// holds is still listed and approved after it. A third bermd given the first's control
// socket refuses to start, saying why, and the first still serves. Before, every bermd
// served bermd.sock: the second replaced the first's and deleted it at its exit, and the
// first's requests could only time out.
func TestEachBermdServesItsOwnApprovalSocket(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	flags := []string{"--approvals-dir", api, "--approvals-token", tokenFile}
	first := startDaemon(t, flags...)
	second := startDaemon(t, flags...)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(wedgePolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	ws := wedgeWorkspace(t)
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", first.socket, "--daemon", "required",
		"--call-id", "socket-first", "--workspace", ws, "--policy", pol, "--", "sh", "-c", "rm keep/x; echo rm=$?"))
	cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "socket-first" })

	if socks, _ := filepath.Glob(filepath.Join(api, "*.sock")); len(socks) != 2 {
		t.Errorf("approval sockets of two bermds: %v", socks)
	}
	second.cmd.Process.Signal(os.Interrupt)
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("the second bermd's exit: %v\n%s", err, second.log)
	}
	p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "socket-first" })

	// A third bermd on the first's control socket (its own state and no metrics) refuses.
	third := exec.Command(bermbin.Path(t, "bermd"), append([]string{"--state-dir", filepath.Join(dir, "state3"), "--socket", first.socket,
		"--metrics", "", "--no-rules"}, flags...)...)
	var log bytes.Buffer
	third.Stderr = &log
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- third.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(log.String(), "another live process serves this approval API socket") {
			t.Errorf("the third bermd's refusal: %v\n%s", err, log.String())
		}
	case <-time.After(60 * time.Second):
		third.Process.Kill()
		<-exited
		t.Fatalf("a third bermd on the first's socket kept running:\n%s", log.String())
	}

	if r := bermbin.Berm(t, nil, append([]string{"approve", p.ID, "--by", "alice"}, cli.cli...)...); r.Exit != 0 {
		t.Fatalf("berm approve after the second bermd's exit: %s", r.Stderr)
	}
	if r := first.ended(t, "socket-first", done); r.Exit != 0 || !strings.Contains(r.Stdout, "rm=0") {
		t.Fatalf("the first bermd's approved call: %+v", r)
	}
}
