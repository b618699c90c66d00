package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// Exec approvals through bermd: a held exec of a gated program runs once approved with
// berm approve; a thread that rewrites the held exec's argv gets the exec killed by the
// kernel's exec hook after the approval, before it runs.
func TestApprovalExecBermd(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	api := filepath.Join(dir, "api")
	d := startDaemon(t, "--approvals-dir", api, "--approvals-token", tokenFile)
	cli := []string{"--dir", api, "--token", tokenFile}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-exec-bermd}
spec:
  approvals:
    timeout: 2m
    rules:
      - name: run-touch
        match: {exec: /usr/bin/touch, argv: "(?i)drop"}
`), 0o644)
	race := `
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
a0 = ctypes.create_string_buffer(b"touch", 16)
a1 = ctypes.create_string_buffer(b"drop-a", 16)
argv = (ctypes.c_void_p * 3)(ctypes.addressof(a0), ctypes.addressof(a1), None)
def rewrite():
    time.sleep(0.3)
    while True:
        ctypes.memmove(a1, b"drop-b\0", 7)
        time.sleep(0.001)
threading.Thread(target=rewrite, daemon=True).start()
libc.execv(b"/usr/bin/touch", argv)
`
	for _, tc := range []struct {
		id, marker string
		argv       []string
		ran        bool
	}{
		{"exec-ok", "drop-1", []string{"sh", "-c", "touch drop-1; echo rc=$?"}, true},
		{"exec-race", "drop-a", []string{"python3", "race.py"}, false},
	} {
		ws := bermbin.Workspace(t)
		os.Chown(ws, 65534, 65534)
		os.WriteFile(filepath.Join(ws, "race.py"), []byte(race), 0o644)
		done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), append([]string{"run", "--socket", d.socket, "--daemon", "required",
			"--call-id", tc.id, "--workspace", ws, "--policy", pol, "--"}, tc.argv...)...))
		var pending []approval.PendingView
		for deadline := time.Now().Add(60 * time.Second); len(pending) == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no request", tc.id)
			}
			time.Sleep(50 * time.Millisecond)
			r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, cli...)...)
			pending = nil
			if err := json.Unmarshal([]byte(r.Stdout), &pending); err != nil {
				t.Fatal(err)
			}
		}
		if p := pending[0]; p.Action != "exec" || p.Rule != "run-touch" || p.Object != "/usr/bin/touch "+tc.marker {
			t.Fatalf("%s: pending %+v", tc.id, p)
		}
		time.Sleep(time.Second)
		if r := bermbin.Berm(t, nil, append([]string{"approve", pending[0].ID, "--by", "alice"}, cli...)...); r.Exit != 0 {
			t.Fatalf("berm approve: %s", r.Stderr)
		}
		r := <-done
		t.Logf("%s: exit %d %q %q", tc.id, r.Exit, r.Stdout, r.Stderr)
		for _, f := range []string{tc.marker, "drop-b"} {
			_, err := os.Stat(filepath.Join(ws, f))
			if want := tc.ran && f == tc.marker; (err == nil) != want {
				t.Errorf("%s: %s exists %v, want %v", tc.id, f, err == nil, want)
			}
		}
		tl := bermbin.Timeline(t, d.state, "default/"+tc.id)
		kills := 0
		for _, e := range tl.Events {
			if dn := e.Denial; dn != nil && dn.Layer == event.LayerApproval && strings.Contains(dn.Rule, "argv executed is not") {
				kills++
			}
		}
		if (kills == 1) == tc.ran || kills > 1 {
			t.Errorf("%s: %d exec-hook kills in the trail", tc.id, kills)
		}
	}
}
