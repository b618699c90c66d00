package sandboxer_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
)

// A DNS query sent straight to a server, over UDP and TCP, as a tool with its own resolver
// would: it prints the rcode and the first answer's address, or the error.
const directDNSScript = `import socket, struct, sys
server = sys.argv[1]
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\x04cidr\x04test\x00" + struct.pack(">HH", 1, 1)
def parse(r):
    rcode = r[3] & 0xf
    if struct.unpack(">H", r[6:8])[0] == 0:
        return "rcode%d" % rcode
    return "rcode%d:%s" % (rcode, socket.inet_ntoa(r[-4:]))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    try:
        s.sendto(q, (server, 53)); r, frm = s.recvfrom(4096)
        return parse(r) + ("" if frm == (server, 53) else " from %s" % (frm,))
    except OSError as e:
        return "error %s" % e
def tcp():
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((server, 53)); s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]; return parse(s.recv(n))
    except OSError as e:
        return "error %s" % e
print("udp", udp())
print("tcp", tcp())
`

// A host-filtered policy that names no domain and opens port 53 of a server by cidr: the
// call's DNS is not berm's resolver's (nothing is redirected, nothing REFUSED); its cidr rule
// decides, as any other traffic, and the server it names answers.
func TestCIDRPortFiftyThreeWithoutDomainsIsNotRedirected(t *testing.T) {
	bermbin.RequireRoot(t)
	// a loopback address of its own, port 53 free there whatever else runs on the host
	at := netip.AddrFrom4([4]byte{127, 53, byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 1)})
	srv := dnstest.StartAt(t, netip.AddrPortFrom(at, 53), dnstest.Zone{"cidr.test": {dnstest.A("cidr.test", "198.51.100.9", 60)}})
	// berm's resolver asks this upstream for names a domain rule allows: never asked here
	up := dnstest.Start(t, dnstest.Zone{"cidr.test": {dnstest.A("cidr.test", "198.51.100.10", 60)}})
	pol := filepath.Join(t.TempDir(), "cidr.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: cidr-dns}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {cidr: %s/32, ports: [53], protocol: udp}
      - {cidr: %s/32, ports: [53]}
`, at, at)), 0o644); err != nil {
		t.Fatal(err)
	}
	state, ws := t.TempDir(), bermbin.Workspace(t)
	r := run(t, state, "--call-id", "cidr-dns", "--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--",
		"python3", "-c", directDNSScript, at.String())
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	want := "udp rcode0:198.51.100.9\ntcp rcode0:198.51.100.9"
	if got := strings.TrimSpace(r.Stdout); got != want {
		t.Errorf("got %q, want %q (stderr %s)", got, want, r.Stderr)
	}
	if n := srv.Count("cidr.test"); n != 2 {
		t.Errorf("the server the cidr rule names was asked %d times, want 2", n)
	}
	if n := up.Count("cidr.test"); n != 0 {
		t.Errorf("berm's resolver asked its upstream %d times", n)
	}
	for _, ev := range bermbin.Timeline(t, state, "cidr-dns").Events {
		if ev.Kind == event.KindDNS {
			t.Errorf("a dns event of berm's resolver, which the call does not use: %+v", ev.DNS)
		}
	}
}

// A reload that names a domain sends the running call's DNS to berm's resolver from then on
// (the server its cidr rule names is no longer reached: the name is REFUSED); a reload that
// names none again gives it back to its cidr rules.
func TestDNSRedirectFollowsDomainsAcrossReloads(t *testing.T) {
	bermbin.RequireRoot(t)
	at := netip.AddrFrom4([4]byte{127, 53, byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 1)})
	srv := dnstest.StartAt(t, netip.AddrPortFrom(at, 53), dnstest.Zone{"cidr.test": {dnstest.A("cidr.test", "198.51.100.9", 60)}})
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "198.51.100.10", 60)}})
	cidrOnly := fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: cidr-dns}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {cidr: %s/32, ports: [53], protocol: udp}
`, at)
	withDomain := cidrOnly + "      - {domain: allowed.test, ports: [443]}\n"
	pol := filepath.Join(t.TempDir(), "cidr.yaml")
	if err := os.WriteFile(pol, []byte(cidrOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	loop := strings.Replace(directDNSScript, `print("udp", udp())
print("tcp", tcp())
`, `import os, time
while not os.path.exists("stop"):
    print(udp(), flush=True)
    time.sleep(0.05)
`, 1)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--call-id", "dns-reload",
		"--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--timeout", "60s", "--", "python3", "-c", loop, at.String())
	call := startLineCall(t, cmd)
	const answered, refused = "rcode0:198.51.100.9", "rcode5"
	call.waitFor(t, answered, 3)
	os.WriteFile(pol, []byte(withDomain), 0o644)
	call.waitFor(t, refused, 3)
	asked := srv.Count("cidr.test")
	os.WriteFile(pol, []byte(cidrOnly), 0o644)
	call.waitFor(t, answered, 3)
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	call.cmd.Wait()
	if srv.Count("cidr.test") <= asked {
		t.Errorf("the cidr rule's server was not asked again after the domain rule went")
	}
	var refusedEvents int
	for _, ev := range bermbin.Timeline(t, state, "dns-reload").Events {
		if ev.Kind == event.KindDNS && ev.DNS.Name == "cidr.test" && ev.DNS.Rcode == "REFUSED" {
			refusedEvents++
		}
	}
	if refusedEvents < 3 {
		t.Errorf("%d REFUSED dns events while the policy named a domain, want at least 3", refusedEvents)
	}
}
