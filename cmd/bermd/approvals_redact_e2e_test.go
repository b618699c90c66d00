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

// redactPolicy has a redaction pattern of its own (not strict's, not a brokered secret) and
// a rule gating deletions under reports/.
const redactPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-redact}
spec:
  output:
    redact:
      - {name: ticket-token, regex: 'TKT-[A-Z0-9]{16}'}
  approvals:
    timeout: 2m
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`

// TestApprovalObjectPatternIsRedacted: a file named after something the policy's own output.redact patterns match is deleted
// under an approval rule: the request a person is asked about shows the name redacted on
// every channel it goes out on (berm approvals, its JSON, the webhook's body, bermd's log),
// the call's trail (the approval and denial events, as journalled) shows it redacted too, and an alert says
// a pattern matched. Before, only live brokered secrets were taken out of requests: the
// string went to all of them in clear.
func TestApprovalObjectPatternIsRedacted(t *testing.T) {
	dir := t.TempDir()
	tokenFile, api, keyFile := filepath.Join(dir, "token"), filepath.Join(dir, "api"), filepath.Join(dir, "hook-key")
	os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	h := newHook(t)
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile,
		"--approval-webhook", h.srv.URL+"/hook", "--approval-webhook-secret", keyFile)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(redactPolicy), 0o644)
	cli := approvalsAPI{cli: []string{"--dir", api, "--token", tokenFile}}
	const token = "TKT-7Q2XW9LMB4K8ZR1C"
	ws := bermbin.Workspace(t)
	os.MkdirAll(filepath.Join(ws, "reports"), 0o755)
	// The file is made here and the tool finds its name by listing the directory: the tool's
	// own open of it or an argv naming it would be in the trail (events that are not approval
	// fields, which the policy's patterns do not redact).
	os.WriteFile(filepath.Join(ws, "reports", token+".csv"), []byte("r"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	id := "TestApprovalObjectPatternIsRedacted"
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required",
		"--call-id", id, "--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "python3", "-c", `import os
for f in os.listdir("reports"):
    try:
        os.unlink("reports/" + f); print("rm=0")
    except OSError as e:
        print("rm=%d" % e.errno)`))
	want := filepath.Join(ws, "reports", "[berm:redacted:ticket-token].csv")
	p := cli.waitFor(t, done, func(p approval.PendingView) bool { return p.CallID == id })
	if p.Object != want {
		t.Errorf("berm approvals --json: object %q, want %q", p.Object, want)
	}
	if p.Inode == "" {
		t.Errorf("the request has no inode: the broker looked up the redacted name, not the file")
	}
	if r := bermbin.Berm(t, nil, append([]string{"approvals"}, cli.cli...)...); r.Exit != 0 || strings.Contains(r.Stdout, token) || !strings.Contains(r.Stdout, "[berm:redacted:ticket-token]") {
		t.Errorf("berm approvals: exit %d, %q", r.Exit, r.Stdout)
	}
	select {
	case <-h.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook was not posted")
	}
	h.mu.Lock()
	for _, g := range h.got {
		if bytes.Contains(g.body, []byte(token)) || !bytes.Contains(g.body, []byte("[berm:redacted:ticket-token]")) {
			t.Errorf("webhook body: %s", g.body)
		}
	}
	h.mu.Unlock()
	r := cli.denyUntilEnd(t, d, id, done)
	if !strings.Contains(r.Stdout, "rm=1\n") || strings.Contains(r.Stdout+r.Stderr, token) {
		t.Errorf("the call: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports", token+".csv")); err != nil {
		t.Errorf("the file was deleted: %v", err)
	}
	approvals, alerts := 0, 0
	for _, e := range bermbin.Timeline(t, d.state, "default/"+id).Events {
		switch {
		case e.Approval != nil:
			approvals++
			if e.Approval.Object != want {
				t.Errorf("approval event object %q, want %q", e.Approval.Object, want)
			}
		case e.Denial != nil:
			if strings.Contains(e.Denial.Object, token) {
				t.Errorf("denial object %q", e.Denial.Object)
			}
		case e.Alert != nil:
			if strings.Contains(e.Alert.Output, token) {
				t.Errorf("alert output %q", e.Alert.Output)
			}
			if e.Alert.RuleID == "approval-object-redact" {
				alerts++
			}
		}
	}
	if approvals < 2 || alerts != 1 {
		t.Errorf("%d approval events (want the request and its decision), %d pattern alerts (want 1)", approvals, alerts)
	}
	if bytes.Contains(d.log.Bytes(), []byte(token)) {
		t.Errorf("bermd's log holds the token")
	}
	// The kernel's own syscall event of the held unlink (the path the tool passed) passes the
	// call's patterns too: sandboxer's TestTheTrailOfAHeldUnlinkRedactsThePolicysPatterns.
}
