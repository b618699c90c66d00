package runcli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The embedded default with a terminal asks the person at it, as sudo asks: y approves, n
// (or Enter) denies, and what they type reaches no tool. The decision is in the trail as the
// prompt's, by the user.
func TestApprovalPromptAtTheTerminal(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if _, err := approval.LoadToken(tok); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BERM_APPROVALS_DIR", filepath.Join(dir, "api"))
	t.Setenv("BERM_APPROVALS_TOKEN", tok)
	t.Setenv("USER", "prompt-user")
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: prompt}
spec:
  approvals:
    timeout: 60s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`), 0o644)
	for _, tc := range []struct {
		answer  string
		removed bool
	}{{"y\r", true}, {"n\r", false}} {
		t.Run(strings.TrimSpace(tc.answer), func(t *testing.T) {
			ws := bermbin.Workspace(t)
			os.MkdirAll(filepath.Join(ws, "reports"), 0o755)
			os.WriteFile(filepath.Join(ws, "reports", "x"), []byte("x"), 0o644)
			for _, p := range []string{"reports", "reports/x"} {
				os.Chown(filepath.Join(ws, p), 65534, 65534)
			}
			state := filepath.Join(t.TempDir(), "state")
			term := openCallerTerminal(t)
			cmd := term.start(t, true, "run", "--no-rules", "--state-dir", state, "--daemon", "never", "--call-id", "prompt",
				"--workspace", ws, "--policy", pol, "--", "sh", "-c", "rm reports/x; echo rm=$?")
			term.waitFor(t, 0, "? [y/N] ")
			if q := term.text(); !strings.Contains(q, "action: unlink (unlinkat)\r\n") || !strings.Contains(q, "object: "+ws+"/reports/x\r\n") ||
				!strings.Contains(q, "rule:   delete-reports\r\n") {
				t.Fatalf("the question does not say what: %s", term.text())
			}
			term.typeKeys(t, tc.answer)
			if status := term.wait(t, cmd); status != 0 {
				t.Fatalf("status %d: %s", status, term.text())
			}
			_, err := os.Stat(filepath.Join(ws, "reports", "x"))
			if removed := err != nil; removed != tc.removed {
				t.Fatalf("removed %v, want %v; screen:\n%s", removed, tc.removed, term.text())
			}
			want := map[bool]string{true: "rm=0", false: "rm=1"}[tc.removed]
			if !strings.Contains(term.text(), want) {
				t.Fatalf("no %s on the screen:\n%s", want, term.text())
			}
			r := exec.Command(bermbin.Path(t, "berm"), "timeline", "--state-dir", state, "prompt")
			out, _ := r.CombinedOutput()
			outcome := map[bool]string{true: "approved", false: "denied"}[tc.removed]
			if !strings.Contains(string(out), fmt.Sprintf("%s: unlink %s/reports/x (rule delete-reports, unlinkat) by prompt-user via prompt", outcome, ws)) {
				t.Fatalf("timeline:\n%s", out)
			}
		})
	}
}
