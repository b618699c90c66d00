package sandboxer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The launcher of a call holding a credential with a revoke command is SIGKILLed while its
// tool sleeps: the revoke never ran. While it lived, its pending revoke was a root-only file
// without the value, and another launcher starting then left it alone; the next launcher
// starting after the crash runs it, once, with the call's ids and fingerprint (and no secret
// on stdin), and journals it in the crashed call's trail. Later launchers do not run it again.
func TestCredentialRevokedAfterTheLauncherCrashed(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	dir := t.TempDir()
	log, minted := filepath.Join(dir, "broker.log"), filepath.Join(dir, "minted")
	mint := writeScript(t, `v="minted-$(head -c 9 /dev/urandom | od -An -tx1 | tr -d ' \n')"; echo "$v" > `+minted+`; echo "$v"`+"\n")
	revoke := writeScript(t, `v=$(cat); echo "revoke $BERM_CALL_ID $BERM_TENANT $BERM_TOOL $BERM_SECRET_FINGERPRINT restart=$BERM_REVOKE_AFTER_RESTART stdin=[$v]" >> `+log+"\n")
	pol := credPolicy(t, fmt.Sprintf(`  credentials:
    - name: db
      source: {exec: [%s]}
      deliver: {env: DB}
      revoke: {exec: [%s]}
      ttl: 5m
`, mint, revoke))
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "crashy", "--tool", "sleeper",
		"--tenant", "t1", "--workspace", ws, "--", "sh", "-c", "touch ready; exec sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFile(t, filepath.Join(ws, "ready"))
	secret, _ := os.ReadFile(minted)
	secret = bytes.TrimSpace(secret)

	pdir := filepath.Join(state, "credentials", "revokes")
	files, _ := filepath.Glob(filepath.Join(pdir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("pending revoke files while the call runs: %v", files)
	}
	for p, want := range map[string]os.FileMode{pdir: 0o700 | os.ModeDir, files[0]: 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: %v %v, want %v owned by root", p, st.Mode(), err, want)
		}
	}
	data, _ := os.ReadFile(files[0])
	var pending struct {
		CallKey string `json:"call_key"`
		Creds   []struct {
			Fingerprint string `json:"fingerprint"`
		} `json:"credentials"`
	}
	if err := json.Unmarshal(data, &pending); err != nil || len(pending.Creds) != 1 || len(pending.Creds[0].Fingerprint) != 32 {
		t.Fatalf("pending file %s: %v", data, err)
	}
	fp := pending.Creds[0].Fingerprint

	// A launcher starting while the call's own lives does not touch its pending revoke.
	if r := run(t, state, "--call-id", "bystander", "--workspace", bermbin.Workspace(t), "--", "true"); r.Exit != 0 {
		t.Fatalf("bystander: %+v", r)
	}
	if got, _ := os.ReadFile(log); len(got) != 0 {
		t.Fatalf("a revoke ran while its call's launcher lived: %s", got)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if got, _ := os.ReadFile(log); len(got) != 0 {
		t.Fatalf("the killed launcher revoked: %s", got)
	}
	for _, id := range []string{"after-1", "after-2"} {
		if r := run(t, state, "--call-id", id, "--workspace", bermbin.Workspace(t), "--", "true"); r.Exit != 0 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	got, _ := os.ReadFile(log)
	if want := "revoke crashy t1 sleeper " + fp + " restart=1 stdin=[]\n"; string(got) != want {
		t.Fatalf("broker log after two restarts:\n%q\nwant exactly once:\n%q", got, want)
	}
	if files, _ := filepath.Glob(filepath.Join(pdir, "*")); len(files) != 0 {
		t.Errorf("pending revoke files left: %v", files)
	}
	tl := bermbin.Timeline(t, state, pending.CallKey)
	var revoked []event.Credential
	issuedFP := ""
	seqs := map[uint64]bool{}
	for _, e := range tl.Events {
		if seqs[e.Seq] {
			t.Errorf("seq %d twice in the crashed call's trail", e.Seq)
		}
		seqs[e.Seq] = true
		if c := e.Credential; c != nil && c.Action == event.CredentialIssued {
			issuedFP = c.Fingerprint
		}
		if c := e.Credential; c != nil && c.Action == event.CredentialRevoked {
			revoked = append(revoked, *c)
		}
	}
	if len(revoked) != 1 || revoked[0].Where != "after restart" || revoked[0].Result != "ok" || revoked[0].Fingerprint != fp || issuedFP != fp {
		t.Fatalf("crashed call's trail: revoked %+v, issued fingerprint %q, pending %q", revoked, issuedFP, fp)
	}
	if len(secret) < 10 {
		t.Fatalf("the minted secret was not captured: %q", secret)
	}
	assertAbsent(t, state, string(secret))
	if strings.Contains(string(got), string(secret)) {
		t.Fatal("the replayed revoke got the secret")
	}
}

// The launcher is SIGKILLed while a credential's minting command runs, after it printed the
// secret: the window between the mint and a fingerprinted pending revoke. The revoke's intent
// was on disk before the mint started (the minting command sees it), so the next launcher
// runs the revoke, once, with the call's ids, an empty fingerprint (never computed) and no
// secret; the call never began, so no trail gets it.
func TestCredentialRevokedWhenTheLauncherDiedMinting(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	dir := t.TempDir()
	log, minted, pidFile := filepath.Join(dir, "broker.log"), filepath.Join(dir, "minted"), filepath.Join(dir, "mint.pid")
	pdir := filepath.Join(state, "credentials", "revokes")
	mint := writeScript(t, `ls `+pdir+`/*.json >/dev/null 2>&1 && intent=yes || intent=no
v="minted-$(head -c 9 /dev/urandom | od -An -tx1 | tr -d ' \n')"; echo "$v"
echo $$ > `+pidFile+`; echo "$v intent=$intent" > `+minted+`
exec sleep 60
`)
	t.Cleanup(func() {
		if pid, err := os.ReadFile(pidFile); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
	revoke := writeScript(t, `v=$(cat); echo "revoke $BERM_CALL_ID $BERM_TENANT $BERM_TOOL fp=[$BERM_SECRET_FINGERPRINT] restart=$BERM_REVOKE_AFTER_RESTART stdin=[$v]" >> `+log+"\n")
	pol := credPolicy(t, fmt.Sprintf(`  credentials:
    - name: db
      source: {exec: [%s]}
      deliver: {env: DB}
      revoke: {exec: [%s]}
`, mint, revoke))
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "minting", "--tool", "minter",
		"--tenant", "t1", "--workspace", ws, "--", "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFile(t, minted)
	got, _ := os.ReadFile(minted)
	secret, intent, _ := strings.Cut(strings.TrimSpace(string(got)), " ")
	if intent != "intent=yes" {
		t.Errorf("the minting command ran before its revoke's intent was on disk: %q", got)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for _, id := range []string{"after-1", "after-2"} {
		if r := run(t, state, "--call-id", id, "--workspace", bermbin.Workspace(t), "--", "true"); r.Exit != 0 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	out, _ := os.ReadFile(log)
	if want := "revoke minting t1 minter fp=[] restart=1 stdin=[]\n"; string(out) != want {
		t.Fatalf("broker log after two restarts:\n%q\nwant exactly once:\n%q", out, want)
	}
	if files, _ := filepath.Glob(filepath.Join(pdir, "*")); len(files) != 0 {
		t.Errorf("pending revoke files left: %v", files)
	}
	if len(secret) < 10 {
		t.Fatalf("the minted secret was not captured: %q", secret)
	}
	assertAbsent(t, state, secret)
}
