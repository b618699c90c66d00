package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// swapPolicy gates writes under scratch/ and under keep/: keep/x is what the tool wants to
// write without being asked about it.
const swapPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-swap}
spec:
  approvals:
    timeout: 2m
    rules:
      - name: scratch-writes
        match: {write: "${WORKSPACE}/scratch/**"}
      - name: keep-writes
        match: {write: "${WORKSPACE}/keep/**"}
`

// TestApprovalSymlinkSwappedWhileHeld: the tool asks to write a file under scratch/ (a person
// would approve it), and while its request waits it swaps a name of the path for a symbolic
// link to keep/x, which a write is asked about under another rule (the last name, or the
// directory above it, removed and replaced; neither removal is gated by a write rule). The
// person approves the request they were shown. The action must not follow the swap: keep/x
// is as it was, and the tool's syscall fails (the name it asked about is gone or now a link).
func TestApprovalSymlinkSwappedWhileHeld(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(swapPolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	truncate := `python3 -c '
import os
try:
    os.truncate("scratch/a/x", 0); print("truncated")
except OSError as e:
    print("truncate errno %d" % e.errno); exit(1)'`
	for i, tc := range []struct {
		name, act, swap, object string
	}{
		{"the last name swapped for a link, a write-open", `echo evil > scratch/a/x`,
			`rm scratch/a/x && ln -s ../../keep/x scratch/a/x`, "scratch/a/x"},
		{"the last name swapped for a link, an append", `echo evil >> scratch/a/x`,
			`rm scratch/a/x && ln -s ../../keep/x scratch/a/x`, "scratch/a/x"},
		{"the directory swapped for a link, a write-open", `echo evil > scratch/a/x`,
			`rm -r scratch/a && ln -s ../keep scratch/a`, "scratch/a/x"},
		{"the directory swapped for a link, a new file", `echo evil > scratch/a/new`,
			`rm -r scratch/a && ln -s ../keep scratch/a`, "scratch/a/new"},
		{"the last name swapped for a link, a truncate", truncate,
			`rm scratch/a/x && ln -s ../../keep/x scratch/a/x`, "scratch/a/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := bermbin.Workspace(t)
			for _, sub := range []string{"scratch/a", "keep"} {
				os.MkdirAll(filepath.Join(ws, sub), 0o755)
			}
			os.WriteFile(filepath.Join(ws, "scratch", "a", "x"), []byte("scratch"), 0o644)
			os.WriteFile(filepath.Join(ws, "keep", "x"), []byte("keep"), 0o644)
			filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
			id := "TestApprovalSymlinkSwapped-" + strconv.Itoa(i)
			// The swap waits for the test's word (a file "go", made once the request is
			// pending), so the request is about the name before the swap.
			script := `(` + tc.act + `; echo rc=$? > rc) & while [ ! -e go ]; do sleep 0.05; done; ` + tc.swap + ` && touch swapped; wait; cat rc`
			done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
				"--call-id", id, "--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "sh", "-c", script))
			want := filepath.Join(ws, tc.object)
			p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == id })
			if p.Object != want || p.Rule != "scratch-writes" {
				t.Fatalf("held: %q under %s, want %q under scratch-writes", p.Object, p.Rule, want)
			}
			os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(filepath.Join(ws, "swapped")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the tool did not swap the link in")
				}
			}
			if r := bermbin.Berm(t, nil, append([]string{"approve", p.ID, "--by", "alice"}, cli.cli...)...); r.Exit != 0 {
				t.Fatalf("berm approve: %s", r.Stderr)
			}
			// Anything the tool asks next (it should not) is denied.
			r := cli.denyUntilEnd(t, d, id, done)
			if b, err := os.ReadFile(filepath.Join(ws, "keep", "x")); err != nil || string(b) != "keep" {
				t.Errorf("keep/x after the approval: %q %v (stdout %q, stderr %q)", b, err, r.Stdout, r.Stderr)
			}
			if _, err := os.Stat(filepath.Join(ws, "keep", "new")); err == nil {
				t.Errorf("keep/new was made through the swapped directory")
			}
			if strings.Contains(r.Stdout, "rc=0") || strings.Contains(r.Stdout, "truncated") {
				t.Errorf("the action followed the swap or acted on another file: stdout %q", r.Stdout)
			}
		})
	}
}
