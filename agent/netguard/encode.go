package netguard

import (
	"fmt"

	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/sandboxer/policy"
)

// MaxPrefixes is how many prefixes one call's trie holds (BERM_MAX_NET_PREFIXES).
const MaxPrefixes = 4096

// MaxSocketRules is how many socket(family, type) pairs one call may be allowed
// (BERM_MAX_SOCK_RULES).
const MaxSocketRules = 16

// trieEntry is one key and value of a call's LPM trie.
type trieEntry struct {
	key bpf.NetpolicyBermNetKey
	val bpf.NetpolicyBermNetPrefix
}

// encodeTrie turns the compiled policy into the trie the kernel reads. It refuses what the
// kernel could not judge as Decide does (a prefix with too many entries, an IPv4 prefix that
// would be keyed at the wrong length) instead of loading something subtly different.
func encodeTrie(pol *policy.NetPolicy) ([]trieEntry, error) {
	if len(pol.Prefixes) > MaxPrefixes {
		return nil, fmt.Errorf("network policy has %d prefixes, at most %d fit a call's trie", len(pol.Prefixes), MaxPrefixes)
	}
	out := make([]trieEntry, 0, len(pol.Prefixes))
	seen := make(map[[17]byte]bool, len(pol.Prefixes))
	for _, p := range pol.Prefixes {
		if !p.Prefix.IsValid() || !p.Prefix.Addr().Is6() || p.Prefix.Addr().Zone() != "" {
			return nil, fmt.Errorf("prefix %s: the trie is keyed by IPv6 prefixes (IPv4 as IPv4-mapped) without zone", p.Prefix)
		}
		masked := p.Prefix.Masked()
		var te trieEntry
		te.key.Prefixlen = uint32(masked.Bits())
		te.key.Addr = masked.Addr().As16()
		id := [17]byte(append(te.key.Addr[:], byte(te.key.Prefixlen)))
		if seen[id] {
			return nil, fmt.Errorf("prefix %s appears twice", masked)
		}
		seen[id] = true
		if len(p.Entries) > len(te.val.E) {
			return nil, fmt.Errorf("prefix %s carries %d entries, at most %d fit", p.Prefix, len(p.Entries), len(te.val.E))
		}
		for i, e := range p.Entries {
			if e.PortLo > e.PortHi {
				return nil, fmt.Errorf("prefix %s entry %d: ports %d-%d are reversed", p.Prefix, i, e.PortLo, e.PortHi)
			}
			ke := bpf.NetpolicyBermNetEntry{PortLo: e.PortLo, PortHi: e.PortHi, Proto: e.Proto, Rule: e.RuleID}
			if e.Allow {
				ke.Allow = 1
			}
			te.val.E[i] = ke
		}
		te.val.N = uint32(len(p.Entries))
		out = append(out, te)
	}
	return out, nil
}

// encodeSockets turns the socket rules into the per-call value of berm_net_sockets.
func encodeSockets(pol *policy.NetPolicy) (bpf.NetpolicyBermNetSocks, error) {
	var v bpf.NetpolicyBermNetSocks
	if len(pol.Sockets) > len(v.R) {
		return v, fmt.Errorf("network policy has %d socket rules, at most %d fit", len(pol.Sockets), len(v.R))
	}
	for i, s := range pol.Sockets {
		v.R[i] = bpf.NetpolicyBermSockRule{Family: s.Family, Type: s.Type}
	}
	v.N = uint32(len(pol.Sockets))
	return v, nil
}
