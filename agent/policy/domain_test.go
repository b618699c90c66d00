package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestDomainMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"api.github.com", "api.github.com", true},
		{"api.github.com", "API.GitHub.com.", true},
		{"api.github.com", "x.api.github.com", false},
		{"api.github.com", "github.com", false},
		{"*.pypi.org", "files.pypi.org", true},
		{"*.pypi.org", "a.b.pypi.org.", true},
		{"*.pypi.org", "pypi.org", false},
		{"*.pypi.org", "evilpypi.org", false},
		{"*.pypi.org", "pypi.org.evil.com", false},
	} {
		if got := (DomainRule{Pattern: tc.pattern}).Matches(tc.name); got != tc.want {
			t.Errorf("%s matches %s: got %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestPrivateRange(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "private"},
		{"169.254.169.254", "link-local"},
		{"100.64.0.1", "cgnat"},
		{"100.128.0.1", ""},
		{"0.0.0.0", "this-network"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"fd00::1", "unique-local"},
		{"fc00::1", "unique-local"},
		{"fe80::1", "link-local"},
		{"::ffff:10.0.0.1", "private"},
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::808:808", ""},
		{"8.8.8.8", ""},
		{"2606:4700::1111", ""},
		{"198.51.100.7", ""},
	} {
		if got := PrivateRange(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestCompileDomains(t *testing.T) {
	src := header + `spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: API.github.com., ports: [443]}
      - {domain: "*.pypi.org", ports: ["1-65535"], protocol: udp}
      - {cidr: 10.0.0.0/8, ports: ["800-900"]}
`
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(CompileEnv{Workspace: t.TempDir(), Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	d := c.Network.Domains
	if len(d) != 2 || d[0].Pattern != "api.github.com" || d[0].Proto != ProtoTCP || !slices.Equal(d[0].Ports, []PortRange{{443, 443}}) {
		t.Fatalf("domains %+v", d)
	}
	// a range covering DoT or QUIC does not open it
	if want := []PortRange{{1, 442}, {444, 852}, {854, 65535}}; !slices.Equal(d[1].Ports, want) {
		t.Errorf("udp wildcard ports %v, want %v", d[1].Ports, want)
	}
	if r := c.Network.MatchDomains("files.PYPI.org"); len(r) != 1 || r[0].RuleID != d[1].RuleID {
		t.Errorf("match files.pypi.org: %+v", r)
	}
	if r := c.Network.MatchDomains("example.org"); r != nil {
		t.Errorf("example.org matched %+v", r)
	}
	// no CIDR entry for a domain rule; the CIDR range loses 853 only
	for _, e := range c.Network.Entries {
		if e.Allow && e.PortLo <= 853 && e.PortHi >= 853 {
			t.Errorf("entry opens 853: %v", e)
		}
	}
	if allow, _ := c.Network.Decide(netip.MustParseAddr("10.1.2.3"), 852, ProtoTCP); !allow {
		t.Error("10.1.2.3:852 refused")
	}
	if !strings.Contains(c.Rules[d[0].RuleID-1].Text, "api.github.com") {
		t.Errorf("rule text %q", c.Rules[d[0].RuleID-1].Text)
	}
}
