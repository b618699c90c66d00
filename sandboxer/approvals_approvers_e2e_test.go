package sandboxer_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
)

// A rule's approvers are enforced: a decision from someone it does not name is refused with
// a clear error, recorded in the trail, and the request keeps waiting. Identities come from
// the approvers file: root names who decides (mallory, not listed), an approver's own token
// is that approver (eve, listed but not in the group), a unix user is the socket peer's uid
// (nobody, in the group): berm approve run as that user, with no token, decides.
func TestApprovalApproversEnforced(t *testing.T) {
	bermbin.RequireRoot(t)
	// Reachable by nobody: the API directory is 0755 when approvers decide as unix users.
	base, err := os.MkdirTemp("", "berm-approvers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o711)
	tokenFile := filepath.Join(base, "token")
	tok, err := approval.LoadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	api := filepath.Join(base, "api")
	eveToken := "eve-token-0123456789abcdef"
	h := sha256.Sum256([]byte(eveToken))
	who := filepath.Join(base, "approvers.yaml")
	os.WriteFile(who, []byte(`people:
  night-shift: {user: nobody}
  eve: {tokenSha256: `+hex.EncodeToString(h[:])+`}
groups:
  reports-oncall: [night-shift]
`), 0o644)
	env := []string{"BERM_APPROVALS_DIR=" + api, "BERM_APPROVALS_TOKEN=" + tokenFile, "BERM_APPROVERS=" + who}
	root := &approval.Client{Dir: api, Token: tok}
	a := approvals{env: env, client: root}

	state := t.TempDir()
	ws, _ := reportsWorkspace(t)
	pol := filepath.Join(t.TempDir(), "approvers.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: approvals-approvers}
spec:
  approvals:
    timeout: 60s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
        approvers: [reports-oncall]
`), 0o644)
	done := startRun(t, env, "--state-dir", state, "--call-id", "approvers", "--workspace", ws, "--policy", pol, "--",
		"sh", "-c", "rm reports/a; echo rm=$?")
	p, ok := a.pending(t, "approvers", done)
	if !ok {
		t.Fatal("the call ended without a request")
	}
	id := p[0].ID
	for _, tc := range []struct {
		name string
		c    *approval.Client
		by   string
		want string
	}{
		{"root naming someone unlisted", root, "mallory", "mallory may not decide it: rule delete-reports names approvers reports-oncall"},
		{"a listed person outside the group", &approval.Client{Dir: api, Token: eveToken}, "", "eve may not decide it"},
		{"an approver's token claiming another name", &approval.Client{Dir: api, Token: eveToken}, "night-shift", "you are eve, not night-shift"},
		{"no identity", &approval.Client{Dir: api, Token: "not-a-token-0123456789"}, "", "401"},
	} {
		err := tc.c.Decide(id, true, tc.by, "let me")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if list, _ := root.List(); len(list) != 1 || list[0].ID != id {
		t.Fatalf("the request no longer waits after refused decisions: %+v", list)
	}
	if _, err := os.Stat(filepath.Join(ws, "reports/a")); err != nil {
		t.Fatal(err)
	}
	// nobody is night-shift, in reports-oncall: berm approve as nobody, with no token (the
	// binaries copied where nobody can execute them; berm runs berm-front, which runs
	// berm-full beside it).
	bin := filepath.Join(base, "bin")
	os.Mkdir(bin, 0o755)
	for _, name := range []string{"berm", "berm-front", "berm-full"} {
		data, err := os.ReadFile(bermbin.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(bin, "berm"), "approve", id, "--dir", api, "--token", tokenFile, "--reason", "on call")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("berm approve as nobody: %v: %s", err, out)
	}
	r := <-done
	if !strings.Contains(r.Stdout, "rm=0") {
		t.Fatalf("%+v", r)
	}
	var got []string
	for _, e := range approvalEvents(bermbin.Timeline(t, state, "approvers").Events) {
		s := e.Outcome + ":" + e.By
		if e.Claimed != "" {
			s += "(claimed " + e.Claimed + ")"
		}
		got = append(got, s)
	}
	// Every refused attempt of an identity is in the trail, the impersonation too (who the
	// token is, and the name claimed); the attempt with no identity is only counted.
	if want := "requested:,refused:mallory,refused:eve,refused:eve(claimed night-shift),approved:night-shift"; strings.Join(got, ",") != want {
		t.Fatalf("trail %v, want %s", got, want)
	}
}
