package main

import (
	"encoding/json"
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

	"github.com/bermsec/berm/collector/falco"
	"github.com/bermsec/berm/testenv/bermbin"
)

// A real call's alert leaves bermd for --alert-webhook as Falco's JSON, signed, naming the
// call, though the receiver failed the first attempts.
func TestDaemonRoutesAlertsToAWebhook(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		attempts int
		got      []falco.Payload
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts <= 2 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if r.Header.Get(falco.SignatureHeader) != falco.Sign([]byte("s3cret"), b) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var p falco.Payload
		if err := json.Unmarshal(b, &p); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got = append(got, p)
	}))
	defer srv.Close()
	// The shipped rules (credential-system-files fires on the read of /etc/shadow).
	d := startDaemon(t, "--no-rules=false", "--alert-webhook", srv.URL, "--alert-webhook-secret", secret)
	ws := bermbin.Workspace(t)
	if r := d.run(t, "", "--call-id", "alerting", "--workspace", ws, "--", "sh", "-c", "cat /etc/shadow 2>/dev/null; exit 0"); r.Exit != 0 {
		t.Fatalf("berm run: exit %d: %s", r.Exit, r.Stderr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no alert reached the webhook in 60 s (%d attempts)", attempts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	p := got[0]
	if p.Rule != "credential-system-files" || p.Priority != "Error" || p.Source != "berm" || p.OutputFields["berm.call.id"] != "alerting" || p.UUID == "" {
		t.Fatalf("alert %+v", p)
	}
	if v := d.metric(t, "berm_alert_webhook_failures_total"); v != 2 {
		t.Errorf("berm_alert_webhook_failures_total = %v, want 2", v)
	}
}

// A secret file others can read is refused at start, as the approval webhook's is.
func TestDaemonRefusesAReadableAlertSecret(t *testing.T) {
	bermbin.RequireRoot(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := bermbin.Run(t, exec.Command(bermbin.Path(t, "bermd"), "--state-dir", filepath.Join(dir, "s"), "--socket", filepath.Join(dir, "sock"), "--metrics", "",
		"--alert-webhook", "http://127.0.0.1:1/", "--alert-webhook-secret", secret))
	if r.Exit == 0 || !strings.Contains(r.Stderr, "readable by others") {
		t.Fatalf("bermd started with a readable secret: exit %d, %s", r.Exit, r.Stderr)
	}
}
