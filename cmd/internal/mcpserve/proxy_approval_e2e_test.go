package mcpserve_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

const guardedPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: proxy-approvals}
spec:
  approvals:
    timeout: 2m
    rules:
      - name: guarded-writes
        match: {write: "${WORKSPACE}/guarded/**"}
`

// Approval rules hold the proxied server's actions as they hold berm run's: the real
// filesystem server's write under a guarded tree waits for a person; approved it is written,
// denied the tools/call is a tool error and nothing is written; a write elsewhere is not asked
// about. Each decision is in the server's trail.
func TestProxyHoldsTheServersActionsForApproval(t *testing.T) {
	node := nodeDir(t)
	dir := t.TempDir()
	api, token := filepath.Join(dir, "api"), filepath.Join(dir, "token")
	d := bermbin.StartDaemon(t, "--no-rules", "--approvals-dir", api, "--approvals-token", token)
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte(guardedPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := bermbin.Workspace(t)
	if err := os.Mkdir(filepath.Join(ws, "guarded"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ws, "guarded"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cli := []string{"--dir", api, "--token", token}
	server := filepath.Join(node, "node_modules", ".bin", "mcp-server-filesystem")
	full := bermbin.Path(t, "berm-full")

	// decide answers the first request of the guarded rule that comes, while the client waits.
	decide := func(verdict string) chan string {
		id := make(chan string, 1)
		go func() {
			defer close(id)
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, cli...)...)
				var pending []approval.PendingView
				if r.Exit != 0 || json.Unmarshal([]byte(r.Stdout), &pending) != nil {
					continue
				}
				for _, p := range pending {
					if p.Rule == "guarded-writes" {
						if r := bermbin.Berm(t, nil, append([]string{verdict, p.ID}, cli...)...); r.Exit != 0 {
							t.Errorf("berm %s: %s", verdict, r.Stderr)
						}
						id <- p.ID
						return
					}
				}
			}
		}()
		return id
	}
	for _, tc := range []struct {
		verdict, file string
		written       bool
	}{
		{"approve", "approved.txt", true},
		{"deny", "denied.txt", false},
	} {
		t.Run(tc.verdict, func(t *testing.T) {
			asked := decide(tc.verdict)
			guarded := filepath.Join(ws, "guarded", tc.file)
			free := filepath.Join(ws, "free-"+tc.file)
			o := tsClient(t, node, map[string]any{
				"stdio": map[string]any{"command": full, "args": []string{"mcp", "proxy", "--socket", d.Socket, "--daemon", "required",
					"--policy", pol, "--workspace", ws, "--", server, ws}},
				"calls": []toolCall{
					{"write_file", map[string]any{"path": guarded, "content": "held"}},
					{"write_file", map[string]any{"path": free, "content": "free"}},
				},
			})
			id := <-asked
			if id == "" {
				t.Fatal("the guarded write was never held for approval")
			}
			if len(o.Results) != 2 {
				t.Fatalf("results: %+v", o.Results)
			}
			_, err := os.Stat(guarded)
			if written := err == nil; written != tc.written || o.Results[0].IsError == tc.written {
				t.Errorf("%s: the guarded file written %v (want %v), tool error %v: %s", tc.verdict, written, tc.written, o.Results[0].IsError, o.Results[0].text())
			}
			if _, err := os.Stat(free); err != nil || o.Results[1].IsError {
				t.Errorf("the write outside the guarded tree: %v %s", err, o.Results[1].text())
			}
			// The request and its decision are in the server's trail.
			var outcomes []string
			for _, c := range bermbin.Calls(t, d.State) {
				for _, e := range bermbin.Timeline(t, d.State, c.Start.CallID).Events {
					if e.Kind == event.KindApproval && e.Approval != nil && e.Approval.ID == id {
						outcomes = append(outcomes, e.Approval.Outcome)
					}
				}
			}
			if want := map[string]string{"approve": "approved", "deny": "denied"}[tc.verdict]; !strings.Contains(strings.Join(outcomes, ","), want) {
				t.Errorf("the trail's approval events of %s: %v, want a %s", id, outcomes, want)
			}
		})
	}
}

// A credential brokered into the proxied server's sandbox stays there: the real filesystem
// server reads it and answers with it, and what reaches the MCP client has it redacted (the
// call's output redactor sees the server's stdout, the MCP stream, as it sees berm run's).
func TestProxyRedactsTheServersBrokeredCredential(t *testing.T) {
	node := nodeDir(t)
	dir := t.TempDir()
	d := bermbin.StartDaemon(t, "--no-rules")
	b := make([]byte, 12)
	rand.Read(b)
	secret := "sk-proxy-" + hex.EncodeToString(b)
	src := filepath.Join(dir, "secret")
	if err := os.WriteFile(src, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: proxy-credential}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {file: /run/secrets/db}}
`, src)), 0o600); err != nil {
		t.Fatal(err)
	}
	server := filepath.Join(node, "node_modules", ".bin", "mcp-server-filesystem")
	o := tsClient(t, node, map[string]any{
		"stdio": map[string]any{"command": bermbin.Path(t, "berm-full"), "args": []string{"mcp", "proxy", "--socket", d.Socket, "--daemon", "required",
			"--policy", pol, "--", server, "/run/secrets"}},
		"calls": []toolCall{{"read_text_file", map[string]any{"path": "/run/secrets/db"}}},
	})
	if len(o.Results) != 1 {
		t.Fatalf("results: %+v", o.Results)
	}
	got := o.Results[0].text()
	if strings.Contains(got, secret) || !strings.Contains(got, "[berm:redacted:db]") {
		t.Fatalf("the server's answer as the client got it: %q (want the credential redacted)", got)
	}
}
