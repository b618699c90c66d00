package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// A tool holding a brokered secret names files after it (the raw value, its hex) and deletes
// them under an approval rule: each request is denied at once by the broker, asking nobody,
// with a credential alert. The secret reaches no channel a request goes out on: not the
// webhook (nothing is posted), not bermd's log, not the trail (the approval and denial events
// carry the object redacted), not the caller's stderr.
func TestDaemonApprovalObjectHoldingASecretIsDeniedAtOnce(t *testing.T) {
	dir := t.TempDir()
	tokenFile, keyFile := filepath.Join(dir, "token"), filepath.Join(dir, "hook-key")
	os.WriteFile(keyFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	h := newHook(t)
	d := startDaemon(t, "--approvals-dir", filepath.Join(dir, "api"), "--approvals-token", tokenFile,
		"--approval-webhook", h.srv.URL+"/hook", "--approval-webhook-secret", keyFile)
	b := make([]byte, 12)
	rand.Read(b)
	secret := "appr-" + hex.EncodeToString(b)
	src := filepath.Join(dir, "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(dir, "p.yaml")
	// The timeout is long: a request that waited would end with the call's own cap (60s),
	// not denied.
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approval-secret}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {file: /run/secrets/db}}
  approvals:
    timeout: 10m
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`, src)), 0o600)
	ws := bermbin.Workspace(t)
	os.MkdirAll(filepath.Join(ws, "reports"), 0o755)
	os.Chown(filepath.Join(ws, "reports"), 65534, 65534)
	// The tool makes the names from the delivered file itself.
	r := d.run(t, "", "--call-id", "named", "--timeout", "60s", "--workspace", ws, "--policy", pol, "--", "sh", "-c", `s=$(cat /run/secrets/db)
x=$(printf %s "$s" | od -An -tx1 | tr -d ' \n')
for f in "reports/$s" "reports/$x"; do : > "$f"; rm "$f"; echo "rm=$?"; done`)
	if r.Exit != 0 || strings.Count(r.Stdout, "rm=1") != 2 {
		t.Fatalf("the deletions were not both denied: %+v", r)
	}
	if strings.Contains(r.Stderr, secret) || strings.Contains(r.Stderr, hex.EncodeToString([]byte(secret))) {
		t.Errorf("the caller's stderr holds the secret: %s", r.Stderr)
	}
	tl := bermbin.Timeline(t, d.state, "named")
	decided, alerts := 0, 0
	leaks := map[string]bool{}
	for _, e := range tl.Events {
		if a := e.Approval; a != nil {
			if !strings.Contains(a.Object, "[berm:redacted:db]") {
				t.Errorf("approval event with the object unredacted: %+v", a)
			}
			if a.Outcome != "requested" {
				decided++
				if a.Outcome != approval.Denied || a.Channel != approval.ChannelBroker || !strings.Contains(a.Reason, "live credential db") {
					t.Errorf("decision: %+v, want denied by the broker for the credential", a)
				}
			}
		}
		if d := e.Denial; d != nil && d.Layer == event.LayerApproval && !strings.Contains(d.Object, "[berm:redacted:db]") {
			t.Errorf("denial with the object unredacted: %+v", d)
		}
		if c := e.Credential; c != nil && c.Action == event.CredentialLeaked && c.Where == "approval object" {
			leaks[c.Encoding] = true
		}
		if a := e.Alert; a != nil && a.RuleID == "credential-approval-object" {
			alerts++
			if a.Severity != "critical" || a.Surface != event.SurfaceCredential {
				t.Errorf("alert %+v", a)
			}
		}
	}
	if decided != 2 || !leaks["raw"] || !leaks["hex"] || alerts != 2 {
		t.Errorf("%d decisions (want 2), leaks by encoding %v (want raw and hex), %d credential alerts (want 2)", decided, leaks, alerts)
	}
	h.mu.Lock()
	for _, g := range h.got {
		t.Errorf("the webhook was sent a request: %s", g.body)
	}
	h.mu.Unlock()
	if !bytes.Contains(d.log.Bytes(), []byte("approval denied: its object holds a live credential")) {
		t.Errorf("bermd's log does not say why the requests were denied")
	}
	assertNowhere(t, d, secret)
}
