package sandboxer_test

import (
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

// The tool resolves names with the C library, through whatever nameserver the host's
// resolv.conf names: the hooks send port 53 to berm's resolver, which asks the test's server
// (--dns-upstream) for allowed names only. Answered addresses connect; an address the call
// did not resolve, and a refused name's, do not.
const dnsScript = `import socket, sys
port = int(sys.argv[1])
def conn(host):
    try:
        addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except socket.gaierror as e:
        return "unresolved"
    s = socket.socket()
    try:
        s.connect(addr); return "ok:" + addr[0]
    except OSError as e:
        return "errno%d" % e.errno
def direct(ip):
    s = socket.socket()
    try:
        s.connect((ip, port)); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
print("direct", direct("127.0.0.21"))
print("allowed", conn("allowed.test"))
print("alias", conn("alias.test"))
print("denied", conn("denied.test"))
print("denieddirect", direct("127.0.0.24"))
`

func TestDomainEgressThroughBermRun(t *testing.T) {
	bermbin.RequireRoot(t)
	up := dnstest.Start(t, dnstest.Zone{
		"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)},
		"alias.test":   {dnstest.CNAME("alias.test", "end.cdn.test", 60)},
		"end.cdn.test": {dnstest.A("end.cdn.test", "127.0.0.23", 60)},
		"denied.test":  {dnstest.A("denied.test", "127.0.0.24", 60)},
	})
	var targets []*listener
	for _, a := range []string{"127.0.0.21", "127.0.0.23", "127.0.0.24"} {
		p := 0
		if len(targets) > 0 {
			p = port(targets[0])
		}
		targets = append(targets, listen(t, "tcp4", fmt.Sprintf("%s:%d", a, p)))
	}
	P := port(targets[0])
	pol := filepath.Join(t.TempDir(), "dns.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dns-test}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: [%d], allowPrivate: true}
      - {domain: alias.test, ports: [%d], allowPrivate: true}
`, P, P)), 0o644); err != nil {
		t.Fatal(err)
	}
	state, ws := t.TempDir(), bermbin.Workspace(t)
	r := run(t, state, "--call-id", "dns-1", "--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--",
		"python3", "-c", dnsScript, fmt.Sprint(P))
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = v
		}
	}
	for k, want := range map[string]string{"direct": "errno1", "allowed": "ok:127.0.0.21", "alias": "ok:127.0.0.23", "denied": "unresolved", "denieddirect": "errno1"} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (stdout %q, stderr %q)", k, got[k], want, r.Stdout, r.Stderr)
		}
	}
	if targets[2].accepted.Load() != 0 {
		t.Errorf("denied.test's address accepted %d connections", targets[2].accepted.Load())
	}
	if n := up.Count("denied.test"); n != 0 {
		t.Errorf("the upstream was asked for denied.test %d times", n)
	}
	tl := bermbin.Timeline(t, state, "dns-1")
	var seen []string
	for _, ev := range tl.Events {
		if ev.Kind == event.KindDNS && ev.DNS != nil && ev.DNS.Type == "A" {
			seen = append(seen, ev.DNS.Name+" "+ev.DNS.Verdict+" "+ev.DNS.Rcode+" "+strings.Join(ev.DNS.Answers, ","))
		}
	}
	for _, want := range []string{"allowed.test allowed NOERROR 127.0.0.21", "alias.test allowed NOERROR 127.0.0.23", "denied.test refused REFUSED "} {
		if !slices.Contains(seen, want) {
			t.Errorf("no dns event %q in the timeline: %q", want, seen)
		}
	}
}
