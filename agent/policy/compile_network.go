package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// MaxNetEntries bounds the entries one prefix may carry (its own and those it inherits), so
// the kernel side can walk them in a bounded loop. It is part of the C/Go contract.
const MaxNetEntries = 64

// Protocol numbers in NetEntry.Proto.
const (
	ProtoAny = 0
	ProtoTCP = unix.IPPROTO_TCP
	ProtoUDP = unix.IPPROTO_UDP
)

// NetEntry is one egress decision: traffic to its prefix, on PortLo..PortHi, with Proto.
type NetEntry struct {
	Prefix netip.Prefix // always IPv6; IPv4 as IPv4-mapped (::ffff:a.b.c.d/96+n)
	PortLo uint16
	PortHi uint16
	Proto  uint8 // ProtoAny, ProtoTCP or ProtoUDP
	Allow  bool
	RuleID uint32
}

func (e NetEntry) String() string {
	verdict := "deny"
	if e.Allow {
		verdict = "allow"
	}
	return fmt.Sprintf("%s %s proto=%d ports=%d-%d rule=%d", verdict, e.Prefix, e.Proto, e.PortLo, e.PortHi, e.RuleID)
}

func (e NetEntry) matches(port uint16, proto uint8) bool {
	return (e.Proto == ProtoAny || e.Proto == proto) && port >= e.PortLo && port <= e.PortHi
}

// NetPrefix is one key of the LPM trie and its value: the entries to try in order, first match
// wins. A prefix carries the entries of every shorter prefix containing it after its own, so
// the one longest-prefix lookup the kernel makes sees everything that applies.
type NetPrefix struct {
	Prefix  netip.Prefix
	Entries []NetEntry
}

// Key is the prefix as a BPF LPM trie key wants it: a prefix length in bits and the address.
func (p NetPrefix) Key() (prefixLen uint32, addr [16]byte) {
	return uint32(p.Prefix.Bits()), p.Prefix.Addr().As16()
}

// SocketRule allows creating sockets of a family and type (0: any type); every other
// socket() is refused: raw, packet, netlink and the rest.
type SocketRule struct {
	Family uint16
	Type   uint16
}

// NetPolicy is the egress policy of a call, default deny.
type NetPolicy struct {
	Entries  []NetEntry  // every entry, sorted by prefix (address, then length), proto, ports
	Prefixes []NetPrefix // sorted the same way
	Sockets  []SocketRule
	// Domains are the `domain:` rules, in the policy's order: the resolver's to match, their
	// ports open only at addresses it pinned for the call.
	Domains []DomainRule
}

// builtinDenies are refused unless a rule names them (a rule on exactly that prefix, or on a
// narrower one inside it, which wins by being longer): link-local carries the cloud metadata
// service, which hands out credentials. The NAT64 forms are the same targets through a
// translator.
var builtinDenies = []struct {
	prefix netip.Prefix
	text   string
}{
	{netip.MustParsePrefix("169.254.0.0/16"), "IPv4 link-local denied unless a rule names it"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata address denied unless a rule names it"},
	{netip.MustParsePrefix("fe80::/10"), "IPv6 link-local denied unless a rule names it"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata address (IPv6) denied unless a rule names it"},
	{netip.MustParsePrefix("64:ff9b::a9fe:0/112"), "IPv4 link-local through NAT64 denied unless a rule names it"},
}

// to6 maps an IPv4 prefix to its IPv4-mapped IPv6 form; IPv6 prefixes pass unchanged.
func to6(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4() {
		return netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), 96+p.Bits())
	}
	return p
}

func (p *Policy) compileNetwork(c *Compiled) Errors {
	var entries []NetEntry
	named := map[netip.Prefix]bool{}
	for i, r := range p.Spec.Network.Egress {
		proto := uint8(ProtoTCP)
		if r.Protocol == UDP {
			proto = ProtoUDP
		}
		if r.Domain != "" {
			field := fmt.Sprintf("spec.network.egress[%d]", i)
			text := fmt.Sprintf("allow %s %s %v at the addresses resolved for it", r.Protocol, r.Domain, r.Ports)
			if r.AllowPrivate {
				text += ", private ones too"
			}
			id := c.addRule(event.LayerCgroupSock, field, text)
			c.Network.Domains = append(c.Network.Domains, DomainRule{Pattern: r.Domain, Ports: hideSideChannels(r.Ports, proto), Proto: proto, RuleID: id, Field: field, AllowPrivate: r.AllowPrivate})
			continue
		}
		id := c.addRule(event.LayerCgroupSock, fmt.Sprintf("spec.network.egress[%d]", i),
			fmt.Sprintf("allow %s %s %v", r.Protocol, r.CIDR, r.Ports))
		pfx := to6(r.CIDR)
		named[pfx] = true
		for _, pr := range hideSideChannels(r.Ports, proto) {
			entries = append(entries, NetEntry{Prefix: pfx, PortLo: pr.Lo, PortHi: pr.Hi, Proto: proto, Allow: true, RuleID: id})
		}
	}
	var errs Errors
	errs = append(errs, p.injectedUDP()...)
	for i, cr := range p.Spec.Credentials {
		in := cr.Deliver.Inject
		if in == nil {
			continue
		}
		field := fmt.Sprintf("spec.credentials[%d].deliver.inject", i)
		ports := make([]PortRange, 0, len(InjectPorts))
		for _, pt := range InjectPorts {
			ports = append(ports, PortRange{pt, pt})
		}
		for _, h := range in.Hosts {
			text := fmt.Sprintf("allow tcp %s %v through berm's egress, which injects credential %s", h, InjectPorts, cr.Name)
			id := c.addRule(event.LayerCgroupSock, field, text)
			c.Network.Domains = append(c.Network.Domains, DomainRule{Pattern: h, Ports: ports, Proto: ProtoTCP, RuleID: id, Field: field, AllowPrivate: in.AllowPrivate, Inject: cr.Name})
		}
	}
	for _, b := range builtinDenies {
		pfx := to6(b.prefix)
		if named[pfx] {
			continue
		}
		id := c.addRule(event.LayerCgroupSock, "builtin", fmt.Sprintf("deny %s: %s", b.prefix, b.text))
		entries = append(entries, NetEntry{Prefix: pfx, PortLo: 0, PortHi: 65535, Proto: ProtoAny, RuleID: id})
	}
	slices.SortFunc(entries, compareEntries)
	c.Network.Entries = entries

	// group by prefix, then give each prefix its ancestors' entries, longest ancestor first
	var prefixes []NetPrefix
	for _, e := range entries {
		if n := len(prefixes); n > 0 && prefixes[n-1].Prefix == e.Prefix {
			prefixes[n-1].Entries = append(prefixes[n-1].Entries, e)
			continue
		}
		prefixes = append(prefixes, NetPrefix{Prefix: e.Prefix, Entries: []NetEntry{e}})
	}
	for i := range prefixes {
		own := prefixes[i].Prefix
		var anc []NetPrefix
		for _, q := range prefixes {
			if q.Prefix.Bits() < own.Bits() && q.Prefix.Contains(own.Addr()) {
				anc = append(anc, q)
			}
		}
		slices.SortFunc(anc, func(a, b NetPrefix) int { return cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()) })
		list := slices.Clone(prefixes[i].Entries)
		for _, a := range anc {
			list = append(list, a.Entries...)
		}
		// nothing after a catch-all deny can match
		if j := slices.IndexFunc(list, func(e NetEntry) bool {
			return !e.Allow && e.Proto == ProtoAny && e.PortLo == 0 && e.PortHi == 65535
		}); j >= 0 {
			list = list[:j+1]
		}
		if len(list) > MaxNetEntries {
			errs = append(errs, p.fail("spec.network.egress", "%s collects %d port entries with the rules containing it, more than %d", own, len(list), MaxNetEntries))
		}
		prefixes[i].Entries = list
	}
	c.Network.Prefixes = prefixes

	c.Network.Sockets = []SocketRule{{Family: unix.AF_UNIX}}
	for _, fam := range []uint16{unix.AF_INET, unix.AF_INET6} {
		for _, typ := range []uint16{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
			c.Network.Sockets = append(c.Network.Sockets, SocketRule{Family: fam, Type: typ})
		}
	}
	return errs
}

func compareEntries(a, b NetEntry) int {
	return cmp.Or(
		a.Prefix.Addr().Compare(b.Prefix.Addr()),
		cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()),
		cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.PortLo, b.PortLo),
		cmp.Compare(a.PortHi, b.PortHi),
		cmp.Compare(a.RuleID, b.RuleID),
	)
}

// Decide answers as the kernel side does: the longest prefix containing addr, then its
// entries in order; no match is the default deny (rule 0). IPv4 and IPv4-mapped addresses are
// the same key.
func (n *NetPolicy) Decide(addr netip.Addr, port uint16, proto uint8) (allow bool, rule uint32) {
	a := netip.AddrFrom16(addr.As16())
	best := -1
	for i, p := range n.Prefixes {
		if p.Prefix.Contains(a) && (best < 0 || p.Prefix.Bits() > n.Prefixes[best].Prefix.Bits()) {
			best = i
		}
	}
	if best < 0 {
		return false, 0
	}
	for _, e := range n.Prefixes[best].Entries {
		if e.matches(port, proto) {
			return e.Allow, e.RuleID
		}
	}
	return false, 0
}

// SocketAllowed says whether socket(family, type) may be created.
func (n *NetPolicy) SocketAllowed(family uint16, typ int) bool {
	typ &^= unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
	for _, s := range n.Sockets {
		if s.Family == family && (s.Type == 0 || int(s.Type) == typ) {
			return true
		}
	}
	return false
}

// injectedUDP refuses UDP egress in a policy that injects a credential: berm's egress sees
// what the call sends over TCP (the injecting egress and the inspecting relay) and DNS (the
// call's resolver), so a placeholder sent in a UDP datagram to an opened port would leave
// unseen. Failing closed here keeps "the placeholder anywhere else is refused or alerted".
func (p *Policy) injectedUDP() Errors {
	cred := -1
	for i, cr := range p.Spec.Credentials {
		if cr.Deliver.Inject != nil {
			cred = i
			break
		}
	}
	if cred < 0 {
		return nil
	}
	var errs Errors
	for i, r := range p.Spec.Network.Egress {
		if r.Protocol == UDP {
			errs = append(errs, p.fail(fmt.Sprintf("spec.network.egress[%d]", i),
				"expected no udp rule in a policy that injects a credential (spec.credentials[%d].deliver.inject): berm inspects a call's TCP and DNS only, so a placeholder in a UDP datagram would leave unseen; remove the rule or deliver the credential without inject", cred))
		}
	}
	return errs
}
