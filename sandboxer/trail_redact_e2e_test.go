package sandboxer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// redactTrailPolicy has a redaction pattern of its own (spec.output.redact) and a rule gating
// deletions under reports/.
const redactTrailPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: trail-redact}
spec:
  output:
    redact:
      - {name: ticket-token, regex: 'TKT-[A-Z0-9]{16}'}
  approvals:
    timeout: 60s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`

// A file named after what the policy's own output.redact pattern matches, whose deletion is
// held for an approval and denied: the request was redacted already, and now so is the trail.
// The kernel's event of the unlink (the path the tool passed), and every other event of the
// call, show the name with its marker; the token is nowhere in the timeline. Before, the
// kernel's unlink event carried it in clear into the journal.
func TestTheTrailOfAHeldUnlinkRedactsThePolicysPatterns(t *testing.T) {
	bermbin.RequireRoot(t)
	a := newApprovals(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	const token = "TKT-7Q2XW9LMB4K8ZR1C"
	os.MkdirAll(filepath.Join(ws, "reports"), 0o755)
	// Made here and found by listing the directory: the tool's argv does not name it.
	os.WriteFile(filepath.Join(ws, "reports", token+".csv"), []byte("r"), 0o644)
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	pol := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pol, []byte(redactTrailPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	const call = "trail-redact"
	done := startRun(t, a.env, "--state-dir", state, "--call-id", call, "--workspace", ws, "--policy", pol, "--", "python3", "-c", `import os
for f in os.listdir("reports"):
    try:
        os.unlink("reports/" + f); print("rm=0")
    except OSError as e:
        print("rm=%d" % e.errno)`)
	asked := 0
	for {
		p, ok := a.pending(t, call, done)
		if !ok {
			break
		}
		asked++
		if err := a.client.Decide(p[0].ID, false, "tester", "no"); err != nil {
			t.Fatal(err)
		}
	}
	r := <-done
	if asked == 0 || !strings.Contains(r.Stdout, "rm=1\n") {
		t.Fatalf("%d requests held; exit %d\nstdout: %s\nstderr: %s", asked, r.Exit, r.Stdout, r.Stderr)
	}
	var unlinks []string
	for _, e := range bermbin.Timeline(t, state, call).Events {
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), token) {
			t.Errorf("the token is in clear in the trail: %s", b)
		}
		if e.Syscall != nil && strings.HasPrefix(e.Syscall.Name, "unlink") && strings.Contains(e.Syscall.Path, "reports/") {
			unlinks = append(unlinks, e.Syscall.Path)
		}
	}
	if len(unlinks) == 0 {
		t.Fatal("the kernel's event of the held unlink is not in the trail")
	}
	for _, p := range unlinks {
		if p != "reports/[berm:redacted:ticket-token].csv" {
			t.Errorf("unlink event path %q, want the name with its marker", p)
		}
	}
}
