package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

const ancestorPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-ancestors}
spec:
  approvals:
    timeout: 2m
    rules:
      - name: git-deletes
        match: {unlink: "${WORKSPACE}/project/.git/**"}
      - name: config-writes
        match: {write: "${WORKSPACE}/project/config/**"}
`

// A rule protects what is beneath its path, not the path's name: moving the protected tree
// out from under it is asked about as the rule's action. Each case's first step is held;
// the person denies it (and whatever the tool tries next); what the rule protects is intact, and the tool's next step (a
// deletion or a write under the new name) finds nothing to act on. Before, the ancestor's
// rename, the exchange and the rmdir ran at once, unasked.
func TestApprovalRulesProtectTheTreeNotItsName(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(ancestorPolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	exchange := `python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.renameat2(-100, b"decoy", -100, b"project", 2)
print("exchange=%d" % (0 if r == 0 else ctypes.get_errno()))'`
	for _, tc := range []struct {
		name, id, script string
		empty            bool   // project is an empty directory
		rule, object     string // the held request: its rule, and the start of its object (WS: the workspace)
		kept             []string
	}{
		{name: "an ancestor's rename, then a deletion under the new name", id: "mv", script: `mv project p2; echo mv=$?; rm -rf p2/.git`,
			rule: "git-deletes", object: "WS/project -> WS/p2", kept: []string{"project/.git/HEAD"}},
		// GNU mv tries project -> away first (RENAME_NOREPLACE), then away/project.
		{name: "an ancestor moved into another directory, then a write under the new name", id: "mvdir", script: `mkdir away; mv project away/; echo x > away/project/config/app.conf`,
			rule: "git-deletes", object: "WS/project -> WS/away", kept: []string{"project/.git/HEAD", "project/config/app.conf"}},
		{name: "a decoy tree exchanged with the protected one", id: "exchange", script: exchange + `; rm -rf decoy/.git`,
			rule: "git-deletes", object: "WS/decoy -> WS/project", kept: []string{"project/.git/HEAD"}},
		{name: "the rmdir of an emptied ancestor", id: "rmdir", script: `rmdir project; echo rmdir=$?`, empty: true,
			rule: "git-deletes", object: "WS/project", kept: []string{"project"}},
		{name: "a hard link out of the tree, then a write through it", id: "link", script: `ln project/config/app.conf out; echo x >> out`,
			rule: "config-writes", object: "WS/project/config/app.conf => WS/out", kept: []string{"project/config/app.conf"}},
		{name: "a symbolic link out of the tree, then a deletion through it", id: "symlink-rm", script: `ln -s project/.git g; rm g/HEAD`,
			rule: "git-deletes", object: "WS/project/.git/HEAD", kept: []string{"project/.git/HEAD"}},
		{name: "a symbolic link out of the tree, then a write through it", id: "symlink-write", script: `ln -s project/config c; echo x > c/app.conf`,
			rule: "config-writes", object: "WS/project/config/app.conf", kept: []string{"project/config/app.conf"}},
		// The supervisor resolves no magic link: the move is refused outright, nobody asked.
		{name: "a move through /proc/self/fd", id: "procfd", script: `python3 -c '
import os
fd = os.open(".", os.O_RDONLY)
try:
    os.rename("/proc/self/fd/%d/project" % fd, "p2"); print("moved")
except OSError as e:
    print("refused %d" % e.errno)'; rm -rf p2/.git`, kept: []string{"project/.git/HEAD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := bermbin.Workspace(t)
			os.MkdirAll(filepath.Join(ws, "decoy", ".git"), 0o755)
			if tc.empty {
				os.MkdirAll(filepath.Join(ws, "project"), 0o755)
			} else {
				os.MkdirAll(filepath.Join(ws, "project", ".git"), 0o755)
				os.MkdirAll(filepath.Join(ws, "project", "config"), 0o755)
				os.WriteFile(filepath.Join(ws, "project", ".git", "HEAD"), []byte("ref: main"), 0o644)
				os.WriteFile(filepath.Join(ws, "project", "config", "app.conf"), []byte("conf"), 0o644)
			}
			filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
			done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
				"--call-id", tc.id, "--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "sh", "-c", tc.script))
			if tc.rule == "" {
				r := d.ended(t, tc.id, done)
				if !strings.Contains(r.Stdout, "refused") {
					t.Errorf("not refused: %+v", r)
				}
				for _, k := range tc.kept {
					if _, err := os.Stat(filepath.Join(ws, k)); err != nil {
						t.Errorf("%s lost: %v", k, err)
					}
				}
				return
			}
			p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == tc.id })
			if want := strings.ReplaceAll(tc.object, "WS", ws); p.Rule != tc.rule || !strings.HasPrefix(p.Object, want) {
				t.Errorf("held: rule %s, object %q; want rule %s, object starting %q", p.Rule, p.Object, tc.rule, want)
			}
			r := cli.denyUntilEnd(t, d, tc.id, done)
			for _, k := range tc.kept {
				if _, err := os.Stat(filepath.Join(ws, k)); err != nil {
					t.Errorf("%s lost after the deny: %v (stdout %q, stderr %q)", k, err, r.Stdout, r.Stderr)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(ws, "project", "config", "app.conf")); !tc.empty && string(b) != "conf" {
				t.Errorf("project/config/app.conf written: %q", b)
			}
		})
	}
}

// denyUntilEnd denies every request of call id until the call ends (a tool may try again
// another way: GNU mv tries away/project after project -> away).
func (a approvalsAPI) denyUntilEnd(t *testing.T, d *bermd, id string, done chan bermbin.Result) bermbin.Result {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case r := <-done:
			return r
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			t.Fatalf("%s: the call did not end in 90 s", id)
		}
		for _, q := range a.list(t) {
			if q.CallID != id {
				continue
			}
			if r := bermbin.Berm(t, nil, append([]string{"deny", q.ID, "--by", "bob"}, a.cli...)...); r.Exit != 0 && !strings.Contains(r.Stderr, "no pending approval") {
				t.Fatalf("berm deny: %s", r.Stderr)
			}
		}
	}
}

// An approved move does not unprotect the tree: the rules' trees are kept by identity (their
// roots' device and inode at the call's start), so after `mv project p2` is approved, the
// deletion of p2/.git/HEAD and a write into p2/config are still asked about, under the rules
// of project/.git and project/config; denied, both files are as they were. Before, the
// rules matched path strings only and both ran at once, unasked.
func TestApprovalApprovedMoveKeepsTheTreeProtected(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(ancestorPolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	ws := bermbin.Workspace(t)
	os.MkdirAll(filepath.Join(ws, "project", ".git"), 0o755)
	os.MkdirAll(filepath.Join(ws, "project", "config"), 0o755)
	os.WriteFile(filepath.Join(ws, "project", ".git", "HEAD"), []byte("ref: main"), 0o644)
	os.WriteFile(filepath.Join(ws, "project", "config", "app.conf"), []byte("conf"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", "moved", "--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "sh", "-c",
		`mv -T project p2; echo mv=$?; rm p2/.git/HEAD; echo rm=$?; echo x > p2/config/app.conf; echo w=$?`))
	for _, step := range []struct {
		object, rule string
		approve      bool
	}{
		{"WS/project -> WS/p2", "git-deletes", true},
		{"WS/p2/.git/HEAD", "git-deletes", false},
		{"WS/p2/config/app.conf", "config-writes", false},
	} {
		want := strings.ReplaceAll(step.object, "WS", ws)
		p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == "moved" && p.Object == want })
		if p.Rule != step.rule {
			t.Errorf("%s: held under rule %s, want %s", want, p.Rule, step.rule)
		}
		verb := "deny"
		if step.approve {
			verb = "approve"
		}
		if r := bermbin.Berm(t, nil, append([]string{verb, p.ID, "--by", "alice"}, cli.cli...)...); r.Exit != 0 {
			t.Fatalf("berm %s: %s", verb, r.Stderr)
		}
	}
	r := d.ended(t, "moved", done)
	if !strings.Contains(r.Stdout, "mv=0") || !strings.Contains(r.Stdout, "rm=1") || strings.Contains(r.Stdout, "w=0") {
		t.Errorf("stdout %q", r.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "p2", ".git", "HEAD")); err != nil || string(b) != "ref: main" {
		t.Errorf("p2/.git/HEAD after the deny: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "p2", "config", "app.conf")); string(b) != "conf" {
		t.Errorf("p2/config/app.conf after the deny: %q", b)
	}
}

// TestApprovalTreeMadeAfterTheStartIsKept: a protected tree that does not exist at the call's
// first held syscall (a write of log, performed at once) is learned when it does: the tool
// makes project/.git, and after an approved `mv project p2` the deletion of p2/.git/HEAD is
// still asked about; denied, the file is as it was. Before, a root missing at the first held
// syscall was matched by path only for the rest of the call, and the deletion ran unasked.
func TestApprovalTreeMadeAfterTheStartIsKept(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api := filepath.Join(dir, "token"), filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(ancestorPolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	ws := bermbin.Workspace(t)
	os.Lchown(ws, 65534, 65534)
	id := "TestApprovalTreeMadeAfterTheStart"
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", id, "--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "sh", "-c",
		`echo start > log; mkdir -p project/.git && echo ref > project/.git/HEAD; mv -T project p2; echo mv=$?; rm p2/.git/HEAD; echo rm=$?`))
	for _, step := range []struct {
		object  string
		approve bool
	}{
		{"WS/project -> WS/p2", true},
		{"WS/p2/.git/HEAD", false},
	} {
		want := strings.ReplaceAll(step.object, "WS", ws)
		p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == id && p.Object == want })
		if p.Rule != "git-deletes" {
			t.Errorf("%s: held under rule %s, want git-deletes", want, p.Rule)
		}
		verb := "deny"
		if step.approve {
			verb = "approve"
		}
		if r := bermbin.Berm(t, nil, append([]string{verb, p.ID, "--by", "alice"}, cli.cli...)...); r.Exit != 0 {
			t.Fatalf("berm %s: %s", verb, r.Stderr)
		}
	}
	r := d.ended(t, id, done)
	if !strings.Contains(r.Stdout, "mv=0") || !strings.Contains(r.Stdout, "rm=1") {
		t.Errorf("stdout %q", r.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "p2", ".git", "HEAD")); err != nil || string(b) != "ref\n" {
		t.Errorf("p2/.git/HEAD after the deny: %q %v", b, err)
	}
}
