package netguard

import (
	"fmt"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/bpf"
)

// MaxPrefixes is how many prefixes one call's policy may have (BERM_MAX_NET_PREFIXES).
const MaxPrefixes = 4096

// MaxSocketRules is how many socket(family, type) pairs one call may be allowed
// (BERM_MAX_SOCK_RULES).
const MaxSocketRules = 16

// GenBits is how many leading bits of a trie key are the policy version's generation
// (BERM_NET_GEN_BITS).
const GenBits = 64

// trieEntries are a policy version's keys and values in the LPM trie, side by side as the
// batch update takes them.
type trieEntries struct {
	keys []bpf.WireBermNetKey
	vals []bpf.WireBermNetPrefix
}

// genKey is the key of addr/bits in version gen.
func genKey(gen uint64, addr [16]byte, bits int) bpf.WireBermNetKey {
	return bpf.WireBermNetKey{Prefixlen: uint32(GenBits + bits), Gen: [2]uint32{uint32(gen), uint32(gen >> 32)}, Addr: addr}
}

// encodeTrie turns the compiled policy into the trie entries of version gen. It refuses what
// the kernel could not judge as Decide does (a prefix with too many entries, an IPv4 prefix
// that would be keyed at the wrong length) instead of loading something subtly different.
func encodeTrie(pol *policy.NetPolicy, gen uint64) (trieEntries, error) {
	if len(pol.Prefixes) > MaxPrefixes {
		return trieEntries{}, fmt.Errorf("network policy has %d prefixes, at most %d fit a call's trie", len(pol.Prefixes), MaxPrefixes)
	}
	out := trieEntries{keys: make([]bpf.WireBermNetKey, len(pol.Prefixes)), vals: make([]bpf.WireBermNetPrefix, len(pol.Prefixes))}
	seen := make(map[[17]byte]bool, len(pol.Prefixes))
	for n, p := range pol.Prefixes {
		if !p.Prefix.IsValid() || !p.Prefix.Addr().Is6() || p.Prefix.Addr().Zone() != "" {
			return trieEntries{}, fmt.Errorf("prefix %s: the trie is keyed by IPv6 prefixes (IPv4 as IPv4-mapped) without zone", p.Prefix)
		}
		masked := p.Prefix.Masked()
		key, val := &out.keys[n], &out.vals[n]
		*key = genKey(gen, masked.Addr().As16(), masked.Bits())
		id := [17]byte(append(key.Addr[:], byte(masked.Bits())))
		if seen[id] {
			return trieEntries{}, fmt.Errorf("prefix %s appears twice", masked)
		}
		seen[id] = true
		if len(p.Entries) > len(val.E) {
			return trieEntries{}, fmt.Errorf("prefix %s carries %d entries, at most %d fit", p.Prefix, len(p.Entries), len(val.E))
		}
		for i, e := range p.Entries {
			if e.PortLo > e.PortHi {
				return trieEntries{}, fmt.Errorf("prefix %s entry %d: ports %d-%d are reversed", p.Prefix, i, e.PortLo, e.PortHi)
			}
			ke := bpf.WireBermNetEntry{PortLo: e.PortLo, PortHi: e.PortHi, Proto: e.Proto, Rule: e.RuleID}
			if e.Allow {
				ke.Allow = 1
			}
			val.E[i] = ke
		}
		val.N = uint32(len(p.Entries))
	}
	return out, nil
}

// encodeSockets turns the socket rules into the socket part of a version's berm_net_gens record.
func encodeSockets(pol *policy.NetPolicy) (bpf.WireBermNetSocks, error) {
	var v bpf.WireBermNetSocks
	if len(pol.Sockets) > len(v.R) {
		return v, fmt.Errorf("network policy has %d socket rules, at most %d fit", len(pol.Sockets), len(v.R))
	}
	for i, s := range pol.Sockets {
		v.R[i] = bpf.WireBermSockRule{Family: s.Family, Type: s.Type}
	}
	v.N = uint32(len(pol.Sockets))
	return v, nil
}
