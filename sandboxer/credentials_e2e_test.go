package sandboxer_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// newSecret is a value no test prints by accident, with characters that URL and JSON escape.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 9)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return `tok/"q&z+` + hex.EncodeToString(b)
}

// secretForms are the ways a tool would print v, computed here independently of berm's code.
func secretForms(v string) map[string]string {
	j, _ := json.Marshal(v)
	return map[string]string{
		"raw": v, "base64": base64.StdEncoding.EncodeToString([]byte(v)), "base64url": base64.RawURLEncoding.EncodeToString([]byte(v)),
		"hex": hex.EncodeToString([]byte(v)), "url": url.QueryEscape(v), "json": string(j[1 : len(j)-1]),
	}
}

// assertAbsent fails when v or one of its forms is anywhere in the files under dir.
func assertAbsent(t *testing.T, dir, v string) {
	t.Helper()
	n := 0
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("read %s: %v", p, err)
			return nil
		}
		n++
		for enc, f := range secretForms(v) {
			if bytes.Contains(data, []byte(f)) {
				t.Errorf("the secret (%s) is in %s", enc, p)
			}
		}
		return nil
	})
	if n == 0 {
		t.Fatalf("no files under %s: nothing was checked", dir)
	}
}

func credPolicy(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: creds}\nspec:\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cmd.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func readRecord(t *testing.T, path string) event.CallRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec event.CallRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A secret delivered by file and one by env reach their call only: a concurrent call of
// another tenant, knowing the path, finds neither there nor anywhere in its /proc; the file
// is gone after the call, the revoke ran with the fingerprint the record shows, and neither
// value (nor its encodings) is in the state dir.
func TestCredentialsReachOnlyTheirCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state, wsA, wsB := t.TempDir(), bermbin.Workspace(t), bermbin.Workspace(t)
	fileSecret, envSecret := newSecret(t), newSecret(t)
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte(fileSecret+"\n"), 0o600)
	t.Setenv("BERM_TEST_UPSTREAM", envSecret)
	log := filepath.Join(t.TempDir(), "revoke.log")
	revoke := writeScript(t, `read v; echo "$BERM_CALL_ID $BERM_TENANT $BERM_SECRET_FINGERPRINT" >> `+log+"\n")
	pol := credPolicy(t, fmt.Sprintf(`  credentials:
    - name: db
      source: {file: %s}
      deliver: {file: /run/secrets/db}
      revoke: {exec: [%s]}
    - name: up
      source: {env: BERM_TEST_UPSTREAM}
      deliver: {env: UP_TOKEN}
`, src, revoke))
	summary := filepath.Join(t.TempDir(), "a.json")
	// The caller passes a variable of the delivered name: the broker's value wins.
	waitA := background(t, state, "--env", "UP_TOKEN=caller-forged", "--policy", pol, "--tenant", "alpha", "--call-id", "holder", "--summary", summary, "--workspace", wsA, "--",
		"sh", "-c", `[ -s /run/secrets/db ] && [ "$UP_TOKEN" = "$(cat /proc/self/environ | tr '\0' '\n' | grep ^UP_TOKEN= | head -1 | cut -d= -f2-)" ] && [ "$UP_TOKEN" != caller-forged ] && touch ready;
while [ ! -e go ]; do sleep 0.05; done; stat -c '%a %u' /run/secrets/db`)
	waitFile(t, filepath.Join(wsA, "ready"))
	// The file is in the call's mount namespace, and only there: the host sees it through the
	// call's own process, not at its path, and no other namespace has its tmpfs.
	pid := callProcess(t, "holder", "sh")
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/run/secrets/db", pid)); err != nil || string(data) != fileSecret {
		t.Fatalf("the holder's file, seen from the host through its root: %q %v", data, err)
	}
	if _, err := os.Stat("/run/secrets/db"); err == nil {
		t.Fatal("the delivery file exists on the host")
	}
	if n := secretMounts(t); n != 1 {
		t.Fatalf("%d mount namespaces show a berm-secrets tmpfs while one call holds one", n)
	}

	// The neighbour knows the path and looks everywhere its /proc shows.
	b := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--tenant", "beta", "--call-id", "neighbour", "--workspace", wsB, "--",
		"sh", "-c", `cat /run/secrets/db; ls -la /run/secrets; cat /proc/*/environ /proc/*/cmdline /proc/*/root/run/secrets/db; ls /proc; echo neighbour-done`)
	if !strings.Contains(b.Stdout, "neighbour-done") {
		t.Fatalf("neighbour did not run: %+v", b)
	}
	for _, v := range []string{fileSecret, envSecret} {
		if strings.Contains(b.Stdout+b.Stderr, v) {
			t.Fatalf("the neighbour read a secret of another call:\n%s%s", b.Stdout, b.Stderr)
		}
	}
	if !strings.Contains(b.Stderr, "/run/secrets/db") {
		t.Errorf("expected the neighbour's cat to fail on /run/secrets/db: %s", b.Stderr)
	}

	os.WriteFile(filepath.Join(wsA, "go"), nil, 0o644)
	a := waitA()
	if a.Exit != 0 || strings.TrimSpace(a.Stdout) != "400 1000" {
		t.Fatalf("holder: exit %d, stdout %q (want the file 0400 and the tool's own uid), stderr %s", a.Exit, a.Stdout, a.Stderr)
	}
	if n := secretMounts(t); n != 0 {
		t.Fatalf("the call's secrets tmpfs outlived it (%d mount namespaces show one)", n)
	}
	rec := readRecord(t, summary)
	if len(rec.Credentials) != 2 || rec.Credentials[0].Name != "db" || rec.Credentials[0].Revoked != "ok" || len(rec.Credentials[0].Fingerprint) != 32 {
		t.Fatalf("record credentials: %+v", rec.Credentials)
	}
	got, _ := os.ReadFile(log)
	if want := "holder alpha " + rec.Credentials[0].Fingerprint + "\n"; string(got) != want {
		t.Fatalf("revoke log %q, want %q", got, want)
	}
	// The trail names each credential's steps, never its value.
	tl := bermbin.Timeline(t, state, "alpha/holder")
	steps := map[string]int{}
	for _, e := range tl.Events {
		if e.Credential != nil {
			steps[e.Credential.Name+" "+e.Credential.Action]++
		}
	}
	for _, s := range []string{"db issued", "db delivered", "db revoked", "up issued", "up delivered", "up revoked"} {
		if steps[s] != 1 {
			t.Errorf("trail has %d %q, want 1 (%v)", steps[s], s, steps)
		}
	}
	assertAbsent(t, state, fileSecret)
	assertAbsent(t, state, envSecret)
}

// The tool prints its secret in every encoding, and once split across two writes with a pause
// between: the caller receives none of it, each is redacted, and the trail has the leak.
func TestCredentialRedactedInEveryEncoding(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	secret := newSecret(t)
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := credPolicy(t, fmt.Sprintf("  credentials:\n    - {name: api, source: {file: %s}, deliver: {file: /run/secrets/api}}\n", src))
	script := `import base64, binascii, json, sys, time, urllib.parse
v = open("/run/secrets/api", "rb").read()
out = sys.stdout.buffer
for line in [v, base64.b64encode(v), base64.urlsafe_b64encode(b"user:" + v).rstrip(b"="), binascii.hexlify(v),
             binascii.hexlify(v).upper(), urllib.parse.quote(v, safe="").encode(), json.dumps(v.decode()).encode()]:
    out.write(b"x=" + line + b"\n")
out.flush()
out.write(b"split:" + v[:7]); out.flush(); time.sleep(0.3)
out.write(v[7:] + b":end\n"); out.flush()
sys.stderr.write("err " + v.decode() + "\n")
`
	os.WriteFile(filepath.Join(ws, "leak.py"), []byte(script), 0o644)
	summary := filepath.Join(t.TempDir(), "s.json")
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "leaker", "--summary", summary, "--workspace", ws, "--", "python3", "leak.py")
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	for enc, f := range secretForms(secret) {
		if strings.Contains(r.Stdout+r.Stderr, f) {
			t.Errorf("the %s form reached the caller:\n%s", enc, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, secret[:7]) {
		t.Errorf("the first part of the split secret reached the caller:\n%s", r.Stdout)
	}
	if n := strings.Count(r.Stdout, "[berm:redacted:api]"); n != 8 || !strings.Contains(r.Stdout, "split:[berm:redacted:api]:end") {
		t.Errorf("%d redactions in stdout (want 8, the split one whole):\n%s", n, r.Stdout)
	}
	if !strings.Contains(r.Stderr, "err [berm:redacted:api]") {
		t.Errorf("stderr not redacted: %s", r.Stderr)
	}
	rec := readRecord(t, summary)
	if len(rec.Credentials) != 1 || rec.Credentials[0].Leaks < 9 {
		t.Errorf("record: %+v", rec.Credentials)
	}
	tl := bermbin.Timeline(t, state, "leaker")
	encs, alerts := map[string]bool{}, 0
	for _, e := range tl.Events {
		if e.Credential != nil && e.Credential.Action == event.CredentialLeaked {
			encs[e.Credential.Encoding] = true
		}
		if e.Alert != nil && e.Alert.Surface == event.SurfaceCredential {
			alerts++
		}
	}
	// base64url is reported as base64 where the two spell the secret's part alike (no + or /).
	for _, enc := range []string{"raw", "base64", "hex", "url", "json"} {
		if !encs[enc] {
			t.Errorf("no leak event for the %s encoding (%v)", enc, encs)
		}
	}
	if alerts == 0 {
		t.Error("no credential alert")
	}
	assertAbsent(t, state, secret)
}

// A minting command that fails stops the call before its tool starts; the error names the
// credential, never what the command printed.
func TestCredentialMintFailureStopsTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	pol := credPolicy(t, `  credentials:
    - name: broken
      source: {exec: [/bin/sh, -c, "echo half-minted-SECRETX; echo SECRETX >&2; exit 3"]}
      deliver: {env: TOKEN}
`)
	summary := filepath.Join(t.TempDir(), "s.json")
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "nomint", "--summary", summary, "--workspace", ws, "--", "touch", "ran")
	if r.Exit != 125 {
		t.Fatalf("exit %d, want 125: %s", r.Exit, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the tool ran")
	}
	rec := readRecord(t, summary)
	if rec.EndReason != event.EndSetupFailed || !strings.Contains(rec.EndDetail, "credential broken") || !strings.Contains(rec.EndDetail, "exit status 3") {
		t.Fatalf("end %s: %s", rec.EndReason, rec.EndDetail)
	}
	if strings.Contains(r.Stdout+r.Stderr+rec.EndDetail, "SECRETX") {
		t.Fatalf("the command's output reached the error: %s %s", r.Stderr, rec.EndDetail)
	}
	assertAbsent(t, state, "half-minted-SECRETX")
}

// A call killed by its wall-time cap still has its credential revoked, with the fingerprint
// its record shows; the minting command got the call's identity.
func TestCredentialRevokedWhenACapKillsTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	log := filepath.Join(t.TempDir(), "broker.log")
	mint := writeScript(t, `echo "mint $BERM_CALL_ID $BERM_TENANT $BERM_TOOL $BERM_TTL" >> `+log+`; echo "minted-$BERM_CALL_ID-$$"`+"\n")
	revoke := writeScript(t, `read v; echo "revoke $BERM_CALL_ID $BERM_SECRET_FINGERPRINT ${v%%-*}" >> `+log+"\n")
	pol := credPolicy(t, fmt.Sprintf(`  credentials:
    - name: db
      source: {exec: [%s]}
      deliver: {env: DB}
      revoke: {exec: [%s]}
      ttl: 90s
`, mint, revoke))
	summary := filepath.Join(t.TempDir(), "s.json")
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "capped", "--tool", "slow", "--tenant", "t1",
		"--timeout", "1s", "--summary", summary, "--workspace", ws, "--", "sleep", "60")
	rec := readRecord(t, summary)
	if rec.EndReason != event.EndTimeout {
		t.Fatalf("end %s (exit %d): %s", rec.EndReason, r.Exit, r.Stderr)
	}
	if len(rec.Credentials) != 1 || rec.Credentials[0].Revoked != "ok" {
		t.Fatalf("record: %+v", rec.Credentials)
	}
	got, _ := os.ReadFile(log)
	want := "mint capped t1 slow 90\nrevoke capped " + rec.Credentials[0].Fingerprint + " minted\n"
	if string(got) != want {
		t.Fatalf("broker log:\n%s\nwant:\n%s", got, want)
	}
}

// secretMounts counts the mount namespaces on the host with a berm-secrets tmpfs.
func secretMounts(t *testing.T) int {
	t.Helper()
	seen := map[string]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		if mi, err := os.ReadFile("/proc/" + e.Name() + "/mountinfo"); err == nil && strings.Contains(string(mi), " berm-secrets ") {
			seen[ns] = true
		}
	}
	return len(seen)
}

// Past its ttl a credential's file is gone from the running call and its revoke has run.
func TestCredentialExpiresAtItsTTL(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte(newSecret(t)), 0o600)
	log := filepath.Join(t.TempDir(), "revoke.log")
	revoke := writeScript(t, `echo "revoked $BERM_SECRET_FINGERPRINT" >> `+log+"\n")
	pol := credPolicy(t, fmt.Sprintf("  credentials:\n    - {name: short, source: {file: %s}, deliver: {file: /run/secrets/short}, revoke: {exec: [%s]}, ttl: 1s}\n", src, revoke))
	summary := filepath.Join(t.TempDir(), "s.json")
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "ttl", "--summary", summary, "--workspace", ws, "--",
		"sh", "-c", "test -s /run/secrets/short && echo present; while [ -e /run/secrets/short ]; do sleep 0.1; done; echo gone")
	if r.Stdout != "present\ngone\n" {
		t.Fatalf("stdout %q, stderr %s", r.Stdout, r.Stderr)
	}
	rec := readRecord(t, summary)
	got, _ := os.ReadFile(log)
	if len(rec.Credentials) != 1 || string(got) != "revoked "+rec.Credentials[0].Fingerprint+"\n" {
		t.Fatalf("record %+v, revoke log %q", rec.Credentials, got)
	}
	tl := bermbin.Timeline(t, state, "ttl")
	for _, e := range tl.Events {
		if e.Credential != nil && e.Credential.Action == event.CredentialRevoked && e.Credential.Where != "ttl" {
			t.Errorf("revoked at %q, want ttl", e.Credential.Where)
		}
	}
}

// A credential with runAs has its minting and revoke commands run as that user, with no
// supplementary groups and none of berm's environment (which holds env sources' secrets);
// an unknown user fails the call before it starts.
func TestCredentialCommandsRunAsTheirUser(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	dir, err := os.MkdirTemp("/tmp", "berm-runas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	log := filepath.Join(dir, "broker.log")
	os.WriteFile(log, nil, 0o666)
	os.Chmod(log, 0o666)
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755)
		return p
	}
	mint := script("mint", `echo "mint $(id -u) $(id -g) [$(id -G)] up=${BERM_TEST_UPSTREAM:-none} $BERM_CALL_ID" >> `+log+"; echo token-$$\n")
	revoke := script("revoke", `read v; echo "revoke $(id -u) up=${BERM_TEST_UPSTREAM:-none} $BERM_SECRET_FINGERPRINT ${v%%-*}" >> `+log+"\n")
	t.Setenv("BERM_TEST_UPSTREAM", "launcher-held")
	pol := func(user string) string {
		return credPolicy(t, fmt.Sprintf(`  credentials:
    - name: db
      source: {exec: [%s]}
      deliver: {env: DB}
      revoke: {exec: [%s]}
      runAs: %s
`, mint, revoke, user))
	}
	summary := filepath.Join(t.TempDir(), "s.json")
	r := run(t, state, "--policy", pol("nobody"), "--call-id", "dropped", "--summary", summary, "--workspace", ws, "--", "sh", "-c", `[ -n "$DB" ]`)
	rec := readRecord(t, summary)
	if r.Exit != 0 || len(rec.Credentials) != 1 || rec.Credentials[0].Revoked != "ok" {
		t.Fatalf("exit %d, credentials %+v: %s", r.Exit, rec.Credentials, r.Stderr)
	}
	got, _ := os.ReadFile(log)
	want := "mint 65534 65534 [65534] up=none dropped\nrevoke 65534 up=none " + rec.Credentials[0].Fingerprint + " token\n"
	if string(got) != want {
		t.Fatalf("broker log:\n%s\nwant:\n%s", got, want)
	}
	r = run(t, state, "--policy", pol("no-such-user"), "--call-id", "unknown", "--workspace", ws, "--", "true")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "runAs no-such-user") {
		t.Fatalf("unknown runAs user: exit %d, stderr %s", r.Exit, r.Stderr)
	}
}
