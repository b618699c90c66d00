package policy

import (
	"fmt"
	"net/netip"
	"strings"

	"gopkg.in/yaml.v3"
)

// DomainRule is one compiled `domain:` egress rule: the resolver answers names it matches and
// pins the answers' addresses for the call, on these ports only.
type DomainRule struct {
	Pattern string // lowercase, no trailing dot; "*.x.y" for a wildcard
	Ports   []PortRange
	Proto   uint8 // ProtoTCP or ProtoUDP
	RuleID  uint32
	Field   string // where it comes from: spec.network.egress[i]
	// AllowPrivate: answers in PrivateRange's ranges are pinned too (allowPrivate: true).
	AllowPrivate bool
	// Inject names the credential whose hosts this rule opens: its addresses' ports go to
	// berm's injecting egress (agent/inject), never straight out.
	Inject string
}

// privateRanges are the addresses inside a host or its networks: a public name answered with
// one of them (DNS rebinding) would reach services that trust their own network.
var privateRanges = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"}, // 0.0.0.0 connects to the host itself
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// nat64 carries IPv4 addresses in its last 32 bits (RFC 6052's well-known prefix).
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// PrivateRange names the internal range addr falls in ("loopback", "private", ...), or "".
// IPv4-mapped and NAT64 forms are judged by the IPv4 address they carry.
func PrivateRange(addr netip.Addr) string {
	addr = addr.Unmap()
	if nat64.Contains(addr) {
		b := addr.As16()
		addr = netip.AddrFrom4([4]byte(b[12:]))
	}
	for _, r := range privateRanges {
		if r.prefix.Contains(addr) {
			return r.name
		}
	}
	return ""
}

// Matches says whether the query name (any case, trailing dot or not) falls under the rule. A
// wildcard covers names below its parent, not the parent itself, as in DNS.
func (r DomainRule) Matches(name string) bool {
	name = CanonicalName(name)
	if parent, ok := strings.CutPrefix(r.Pattern, "*."); ok {
		return strings.HasSuffix(name, "."+parent)
	}
	return name == r.Pattern
}

// CanonicalName is the form names are compared in: lowercase, without the root's dot.
func CanonicalName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// MatchDomains are the domain rules that match name, in the policy's order: each opens its
// ports at the name's addresses.
func (n *NetPolicy) MatchDomains(name string) []DomainRule {
	var out []DomainRule
	for _, r := range n.Domains {
		if r.Matches(name) {
			out = append(out, r)
		}
	}
	return out
}

// checkDomain says what is wrong with a domain pattern, or "".
func checkDomain(s string) string {
	if s == "" {
		return "empty"
	}
	name := strings.TrimPrefix(s, "*.")
	if strings.Contains(name, "*") {
		return "a wildcard is allowed only as the whole first label (*.example.com)"
	}
	if len(name) > 253 {
		return fmt.Sprintf("longer than 253 characters (%d)", len(name))
	}
	for _, l := range strings.Split(name, ".") {
		switch {
		case l == "":
			return "an empty label (two dots, or a leading or trailing dot)"
		case len(l) > 63:
			return fmt.Sprintf("label %q longer than 63 characters", l)
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("label %q has %q: letters, digits, '-' and '_' only", l, c)
			}
		}
	}
	return ""
}

func (d *decoder) domain(n *yaml.Node, field string, dst *string) {
	s, ok := d.scalar(n, field, "a domain like api.github.com or *.pypi.org", "!!str")
	if !ok {
		return
	}
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if why := checkDomain(s); why != "" {
		d.fail(n, field, "expected a domain like api.github.com or *.pypi.org, got %s: %s", describe(n), why)
		return
	}
	*dst = s
}

// cidrOrDomain checks that an egress rule names exactly one destination.
func (d *decoder) cidrOrDomain(n *yaml.Node, field string, r *EgressRule) {
	hasCIDR, hasDomain := false, false
	if n = resolve(n); n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			hasCIDR = hasCIDR || n.Content[i].Value == "cidr"
			hasDomain = hasDomain || n.Content[i].Value == "domain"
		}
	} else {
		return // the mapping's own error says it
	}
	switch {
	case hasCIDR && hasDomain:
		d.fail(d.at(join(field, "domain"), n), join(field, "domain"), "expected cidr or domain, got both")
	case !hasCIDR && !hasDomain:
		d.fail(n, join(field, "cidr"), "required field missing (or domain)")
	}
}

// Ports that carry name lookups past berm's resolver: DNS over TLS, and QUIC (DNS over QUIC,
// and HTTP/3 for DNS over HTTPS). A port range that merely covers one does not open it; a
// rule must name the port alone.
var sideChannels = []struct {
	port  uint16
	proto uint8
}{{853, ProtoTCP}, {853, ProtoUDP}, {443, ProtoUDP}}

// hideSideChannels cuts the side-channel ports out of ranges that cover them without naming
// them (853 and UDP 443 open only with a rule whose range is that one port).
func hideSideChannels(ports []PortRange, proto uint8) []PortRange {
	out := make([]PortRange, 0, len(ports))
	for _, r := range ports {
		parts := []PortRange{r}
		for _, sc := range sideChannels {
			if sc.proto != proto {
				continue
			}
			var next []PortRange
			for _, p := range parts {
				if p.Lo == p.Hi || sc.port < p.Lo || sc.port > p.Hi {
					next = append(next, p)
					continue
				}
				if sc.port > p.Lo {
					next = append(next, PortRange{p.Lo, sc.port - 1})
				}
				if sc.port < p.Hi {
					next = append(next, PortRange{sc.port + 1, p.Hi})
				}
			}
			parts = next
		}
		out = append(out, parts...)
	}
	return out
}
