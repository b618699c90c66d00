package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// hook is a webhook receiver on loopback: it keeps what bermd posts.
type hook struct {
	mu   sync.Mutex
	got  []hookReq
	srv  *httptest.Server
	seen chan struct{}
}

type hookReq struct {
	body      []byte
	ts, sig   string
	userAgent string
}

func newHook(t *testing.T) *hook {
	h := &hook{seen: make(chan struct{}, 16)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got = append(h.got, hookReq{body: body, ts: r.Header.Get("X-Berm-Timestamp"), sig: r.Header.Get("X-Berm-Signature")})
		h.mu.Unlock()
		h.seen <- struct{}{}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// Two calls of two tenants wait at once and are decided independently through berm approve
// and berm deny; bermd posts each request to the webhook, signed; its metrics count them.
func TestApprovalsTwoTenantsWebhookMetrics(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	tokenFile, secretFile := filepath.Join(dir, "token"), filepath.Join(dir, "secret")
	secret := "0123456789abcdef0123456789abcdef"
	os.WriteFile(secretFile, []byte(secret+"\n"), 0o600)
	api := filepath.Join(dir, "api")
	h := newHook(t)
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile,
		"--approval-webhook", h.srv.URL+"/hook", "--approval-webhook-secret", secretFile)
	cli := []string{"--dir", api, "--token", tokenFile}

	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-bermd}
spec:
  approvals:
    timeout: 2m
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`), 0o644)
	type call struct {
		tenant, id, ws string
		done           chan bermbin.Result
	}
	calls := []*call{{tenant: "tenant-a", id: "a1"}, {tenant: "tenant-b", id: "b1"}}
	for _, c := range calls {
		c.ws = bermbin.Workspace(t)
		os.MkdirAll(filepath.Join(c.ws, "reports"), 0o755)
		os.WriteFile(filepath.Join(c.ws, "reports", "x"), []byte(c.tenant), 0o644)
		os.Chown(filepath.Join(c.ws, "reports"), 65534, 65534)
		os.Chown(filepath.Join(c.ws, "reports", "x"), 65534, 65534)
		c.done = bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--tenant", c.tenant,
			"--call-id", c.id, "--workspace", c.ws, "--policy", pol, "--", "sh", "-c", "rm reports/x; echo rm=$?"))
	}
	var pending []approval.PendingView
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("two requests never pending at once: %+v", pending)
		}
		time.Sleep(50 * time.Millisecond)
		r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, cli...)...)
		if r.Exit != 0 {
			t.Fatalf("berm approvals: %s", r.Stderr)
		}
		pending = nil
		if err := json.Unmarshal([]byte(r.Stdout), &pending); err != nil {
			t.Fatal(err)
		}
	}
	if v := d.metric(t, "berm_approvals_pending"); v != 2 {
		t.Errorf("berm_approvals_pending %v, want 2", v)
	}
	table := bermbin.Berm(t, nil, append([]string{"approvals"}, cli...)...)
	for _, col := range []string{"ID", "CALL", "TENANT", "TOOL", "ACTION", "OBJECT", "RULE", "AGE", "tenant-a", "tenant-b", "delete-reports"} {
		if !strings.Contains(table.Stdout, col) {
			t.Errorf("berm approvals lacks %s:\n%s", col, table.Stdout)
		}
	}
	byTenant := map[string]approval.PendingView{}
	for _, p := range pending {
		byTenant[p.Tenant] = p
	}
	// Approve tenant-a's: its file goes, tenant-b's request still waits and its file stays.
	if r := bermbin.Berm(t, nil, append([]string{"approve", byTenant["tenant-a"].ID, "--reason", "cleanup ok", "--by", "alice"}, cli...)...); r.Exit != 0 {
		t.Fatalf("berm approve: %s", r.Stderr)
	}
	ra := <-calls[0].done
	if _, err := os.Stat(filepath.Join(calls[0].ws, "reports", "x")); err == nil || !strings.Contains(ra.Stdout, "rm=0") {
		t.Fatalf("tenant-a's approved delete did not happen: %+v", ra)
	}
	if _, err := os.Stat(filepath.Join(calls[1].ws, "reports", "x")); err != nil {
		t.Fatalf("tenant-b's file went with tenant-a's approval: %v", err)
	}
	r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, cli...)...)
	if !strings.Contains(r.Stdout, byTenant["tenant-b"].ID) || strings.Contains(r.Stdout, byTenant["tenant-a"].ID) {
		t.Fatalf("pending after one decision: %s", r.Stdout)
	}
	if r := bermbin.Berm(t, nil, append([]string{"deny", byTenant["tenant-b"].ID, "--reason", "not now", "--by", "bob"}, cli...)...); r.Exit != 0 {
		t.Fatalf("berm deny: %s", r.Stderr)
	}
	rb := <-calls[1].done
	if _, err := os.Stat(filepath.Join(calls[1].ws, "reports", "x")); err != nil || !strings.Contains(rb.Stdout, "rm=1") {
		t.Fatalf("tenant-b's denied delete happened: %+v %v", rb, err)
	}
	// A decision about an id nobody holds fails.
	if r := bermbin.Berm(t, nil, append([]string{"approve", byTenant["tenant-b"].ID}, cli...)...); r.Exit == 0 {
		t.Error("approving a decided request succeeded")
	}

	// The trail: each call's request and decision, by whom, through the API, with the reason.
	for _, tc := range []struct {
		c               *call
		outcome, by, rs string
	}{{calls[0], approval.Approved, "alice", "cleanup ok"}, {calls[1], approval.Denied, "bob", "not now"}} {
		rec := d.call(t, tc.c.id)
		tl := bermbin.Timeline(t, d.state, tc.c.tenant+"/"+tc.c.id)
		var got *event.Approval
		for _, e := range tl.Events {
			if e.Approval != nil && e.Approval.Outcome != "requested" {
				got = e.Approval
			}
		}
		if got == nil || got.Outcome != tc.outcome || got.By != tc.by || got.Reason != tc.rs || got.Channel != approval.ChannelAPI || got.LatencyNs <= 0 {
			t.Errorf("%s: decision in the trail: %+v", tc.c.tenant, got)
		}
		if (tc.outcome == approval.Denied) != (rec.Record.Denials[event.SurfaceApproval] > 0) {
			t.Errorf("%s: approval denials in the record: %v", tc.c.tenant, rec.Record.Denials)
		}
	}

	// The webhook got both requests, each signed with the shared key over timestamp.body.
	for i := 0; i < 2; i++ {
		select {
		case <-h.seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the webhook did not get both requests")
		}
	}
	h.mu.Lock()
	tenants := map[string]bool{}
	for _, g := range h.got {
		mac := hmac.New(sha256.New, []byte(secret))
		fmt.Fprintf(mac, "%s.%s", g.ts, g.body)
		if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); g.sig != want {
			t.Errorf("webhook signature %q, want %q", g.sig, want)
		}
		var body approval.WebhookBody
		if err := json.Unmarshal(g.body, &body); err != nil || body.Type != "approval.request" || body.Request.ID == "" || body.Request.Rule != "delete-reports" {
			t.Errorf("webhook body: %s (%v)", g.body, err)
		}
		tenants[body.Request.Tenant] = true
	}
	h.mu.Unlock()
	if !tenants["tenant-a"] || !tenants["tenant-b"] {
		t.Errorf("webhook tenants: %v", tenants)
	}

	for name, want := range map[string]float64{
		"berm_approvals_pending":                            0,
		`berm_approval_decisions_total{outcome="approved"}`: 1,
		`berm_approval_decisions_total{outcome="denied"}`:   1,
		"berm_approval_decision_seconds_count":              2,
		"berm_approval_requests_total":                      2,
	} {
		if v := d.metric(t, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
