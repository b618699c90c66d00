package sandboxer

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

type lateEvents map[string][]event.Event

func (l lateEvents) AppendAfterRestart(s event.CallStart, evs []event.Event) error {
	l[s.CallKey] = append(l[s.CallKey], evs...)
	return nil
}

// Replaying pending revokes: a file whose launcher holds its lock is left alone; one nobody
// holds is run once per credential, with the call's ids and fingerprint and an empty stdin,
// journalled after restart and removed; a torn file (a launcher that died writing it) goes.
func TestReplayRevokes(t *testing.T) {
	state, tmp := t.TempDir(), t.TempDir()
	dir := filepath.Join(state, pendingRevokesDir)
	os.MkdirAll(dir, 0o700)
	log := filepath.Join(tmp, "log")
	script := filepath.Join(tmp, "revoke.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nv=$(cat); echo \"$1 $BERM_CALL_ID $BERM_TENANT $BERM_TOOL $BERM_TTL $BERM_SECRET_FINGERPRINT $BERM_REVOKE_AFTER_RESTART [$v]\" >> "+log+"\n"), 0o700)
	fail := filepath.Join(tmp, "fail.sh")
	os.WriteFile(fail, []byte("#!/bin/sh\nexit 3\n"), 0o700)
	write := func(key string, f pendingRevokeFile) string {
		p := filepath.Join(dir, key+".json")
		data, _ := json.Marshal(f)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crashed := write("k1", pendingRevokeFile{CallKey: "k1", CallID: "c1", Tenant: "t1", Tool: "tool1", Creds: []pendingRevoke{
		{Name: "db", Fingerprint: "fp-db", Revoke: []string{script, "db"}, TTLSeconds: 60},
		{Name: "gh", Fingerprint: "fp-gh", Revoke: []string{fail}, TTLSeconds: 60},
	}})
	live := write("k2", pendingRevokeFile{CallKey: "k2", CallID: "c2", Tenant: "t2", Tool: "tool2", Creds: []pendingRevoke{
		{Name: "db", Fingerprint: "fp-live", Revoke: []string{script, "live"}, TTLSeconds: 60}}})
	held, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "k3.json")
	os.WriteFile(torn, []byte(`{"call_key":"k3","credentials":[{"na`), 0o600)

	j := lateEvents{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	replayRevokes(state, j, quiet)
	replayRevokes(state, j, quiet) // a second launcher starting: nothing is run twice

	got, _ := os.ReadFile(log)
	if want := "db c1 t1 tool1 60 fp-db 1 []\n"; string(got) != want {
		t.Fatalf("revokes run:\n%q\nwant:\n%q", got, want)
	}
	evs := j["k1"]
	if len(evs) != 2 || len(j) != 1 {
		t.Fatalf("journalled after restart: %+v", j)
	}
	for i, want := range []struct{ name, fp, result string }{{"db", "fp-db", "ok"}, {"gh", "fp-gh", "exit status 3"}} {
		c := evs[i].Credential
		if c == nil || c.Action != event.CredentialRevoked || c.Name != want.name || c.Fingerprint != want.fp || c.Where != "after restart" || !strings.HasPrefix(c.Result, want.result) {
			t.Errorf("event %d: %+v, want %s %s %s after restart", i, c, want.name, want.fp, want.result)
		}
	}
	for p, exists := range map[string]bool{crashed: false, torn: false, live: true} {
		if _, err := os.Stat(p); (err == nil) != exists {
			t.Errorf("%s exists: %v, want %v", filepath.Base(p), err == nil, exists)
		}
	}
	// Its launcher gone, the live call's file is replayed too.
	held.Close()
	replayRevokes(state, j, quiet)
	if got, _ := os.ReadFile(log); !strings.HasSuffix(string(got), "live c2 t2 tool2 60 fp-live 1 []\n") || len(j["k2"]) != 1 {
		t.Fatalf("after its launcher went: %q %+v", got, j["k2"])
	}
}

// A launcher killed while rewriting its file (a revoke ran, the record got shorter) left the
// new record with the old one's tail behind it: the replay runs what the new record holds.
func TestReplayRevokeAfterAnUnfinishedRewrite(t *testing.T) {
	state, tmp := t.TempDir(), t.TempDir()
	dir := filepath.Join(state, pendingRevokesDir)
	os.MkdirAll(dir, 0o700)
	log := filepath.Join(tmp, "log")
	script := filepath.Join(tmp, "revoke.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$1 $BERM_SECRET_FINGERPRINT\" >> "+log+"\n"), 0o700)
	rec := pendingRevokeFile{CallKey: "k1", CallID: "c1", Tenant: "t1", Tool: "tool1", Creds: []pendingRevoke{
		{Name: "db", Fingerprint: "fp-db", Revoke: []string{script, "db"}, TTLSeconds: 60},
		{Name: "gh", Fingerprint: "fp-gh", Revoke: []string{script, "gh"}, TTLSeconds: 60},
	}}
	p := filepath.Join(dir, "call-0011223344556677.json")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	pr := &pendingRevokes{f: f, path: p, rec: rec}
	if err := pr.write(); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(p)
	// db revoked: the shorter record written over the longer one, the cut not made
	pr.rec.Creds = pr.rec.Creds[1:]
	data, _ := json.Marshal(pr.rec)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, _ := os.ReadFile(p); len(got) != len(old) {
		t.Fatalf("the file is %d bytes, want the old record's %d followed by nothing new", len(got), len(old))
	}
	j := lateEvents{}
	replayRevokes(state, j, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got, _ := os.ReadFile(log); string(got) != "gh fp-gh\n" {
		t.Fatalf("revokes run: %q, want gh's alone", got)
	}
	if len(j["k1"]) != 1 {
		t.Errorf("journalled after restart: %+v", j)
	}
}

// A launcher killed while a credential was minting left its intent: no call key (the call
// never began) and no fingerprint. The replay runs the revoke with the call's ids and an empty
// fingerprint, journals nothing (no trail to put it in) and removes the file.
func TestReplayRevokeOfAMintInterrupted(t *testing.T) {
	state, tmp := t.TempDir(), t.TempDir()
	dir := filepath.Join(state, pendingRevokesDir)
	os.MkdirAll(dir, 0o700)
	log := filepath.Join(tmp, "log")
	script := filepath.Join(tmp, "revoke.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nv=$(cat); echo \"$BERM_CALL_ID $BERM_TENANT $BERM_TOOL fp=[$BERM_SECRET_FINGERPRINT] $BERM_REVOKE_AFTER_RESTART [$v]\" >> "+log+"\n"), 0o700)
	data, _ := json.Marshal(pendingRevokeFile{CallID: "c1", Tenant: "t1", Tool: "tool1", Creds: []pendingRevoke{{Name: "db", Revoke: []string{script}, TTLSeconds: 60}}})
	p := filepath.Join(dir, "call-0011223344556677.json")
	os.WriteFile(p, data, 0o600)
	j := lateEvents{}
	replayRevokes(state, j, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got, _ := os.ReadFile(log); string(got) != "c1 t1 tool1 fp=[] 1 []\n" {
		t.Fatalf("revokes run: %q", got)
	}
	if len(j) != 0 {
		t.Errorf("journalled for a call that never began: %+v", j)
	}
	if _, err := os.Stat(p); err == nil {
		t.Error("the intent file is left")
	}
}
