package netguard

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
)

const policyHeader = "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata:\n  name: t\n"

// compileNet compiles a policy whose egress rules are egress (YAML list items) with the real
// compiler, so the tests load what the sandboxer would.
func compileNet(t testing.TB, mode, egress string) *policy.Compiled {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"ws", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if egress == "" {
		egress = "      []\n"
	}
	p, err := policy.Parse("p.yaml", []byte(policyHeader+"spec:\n  mode: "+mode+"\n  isolation: {network: host-filtered}\n  network:\n    egress:\n"+egress))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(policy.CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// decideEncoded answers from the trie the way netpolicy.bpf.c does for version gen: the longest
// prefix among the keys that start with gen, then its entries in order, else rule 0.
func decideEncoded(trie trieEntries, gen uint64, addr netip.Addr, port uint16, proto uint8) (bool, uint32) {
	a := netip.AddrFrom16(addr.As16())
	best := -1
	for i, k := range trie.keys {
		if k.Prefixlen < GenBits || uint64(k.Gen[1])<<32|uint64(k.Gen[0]) != gen {
			continue
		}
		p := netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)-GenBits)
		if p.Contains(a) && (best < 0 || k.Prefixlen > trie.keys[best].Prefixlen) {
			best = i
		}
	}
	if best < 0 {
		return false, 0
	}
	v := trie.vals[best]
	for _, e := range v.E[:v.N] {
		if (e.Proto == 0 || e.Proto == proto) && port >= e.PortLo && port <= e.PortHi {
			return e.Allow == 1, e.Rule
		}
	}
	return false, 0
}

func TestEncodeTrieDecidesLikePolicy(t *testing.T) {
	web := compileNet(t, "enforce", `      - {cidr: 0.0.0.0/0, ports: [443]}
      - {cidr: "::/0", ports: [443]}
      - {cidr: 10.0.0.0/8, ports: [22]}
      - {cidr: 10.1.0.0/16, ports: ["8000-8100"]}
      - {cidr: 10.1.0.53, ports: [53], protocol: udp}
      - {cidr: 169.254.169.254, ports: [80]}
`)
	none := compileNet(t, "enforce", "")
	tcp, udp := uint8(policy.ProtoTCP), uint8(policy.ProtoUDP)
	// Both versions live in the one trie, as during a hot reload (and a generation above 32
	// bits): each must decide as its own policy, never reach the other's keys.
	versions := []struct {
		c   *policy.Compiled
		gen uint64
	}{{web, 1<<32 | 7}, {none, 8}}
	var trie trieEntries
	for _, v := range versions {
		entries, err := encodeTrie(&v.c.Network, v.gen)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries.keys) != len(v.c.Network.Prefixes) || len(entries.vals) != len(entries.keys) {
			t.Fatalf("%d keys, %d values for %d prefixes", len(entries.keys), len(entries.vals), len(v.c.Network.Prefixes))
		}
		for _, k := range entries.keys {
			if k != genKey(v.gen, k.Addr, int(k.Prefixlen)-GenBits) || k.Prefixlen > GenBits+128 {
				t.Fatalf("key %+v not of version %d", k, v.gen)
			}
		}
		trie.keys = append(trie.keys, entries.keys...)
		trie.vals = append(trie.vals, entries.vals...)
	}
	// a generation nobody installed decides nothing: the default deny
	if allow, rule := decideEncoded(trie, 9, netip.MustParseAddr("93.184.216.34"), 443, uint8(policy.ProtoTCP)); allow || rule != 0 {
		t.Fatalf("unknown version: allow=%v rule=%d", allow, rule)
	}
	for _, v := range versions {
		c, gen := v.c, v.gen
		addrs := []string{"93.184.216.34", "::ffff:93.184.216.34", "2606:2800::1", "10.9.9.9", "10.1.2.3",
			"10.1.0.53", "10.1.255.255", "10.2.0.0", "169.254.169.254", "169.254.169.253", "169.254.0.1",
			"fe80::1", "fd00:ec2::254", "64:ff9b::a9fe:a9fe", "127.0.0.1", "::1", "0.0.0.0", "::"}
		r := rand.New(rand.NewPCG(1, 2))
		for range 2000 {
			var b [16]byte
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if r.IntN(2) == 0 { // half IPv4, mostly near the rules' prefixes
				b = netip.AddrFrom4([4]byte{[]byte{10, 169, 93, byte(r.Uint32())}[r.IntN(4)], b[1], b[2], b[3]}).As16()
			}
			addrs = append(addrs, netip.AddrFrom16(b).String())
		}
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			for _, port := range []uint16{0, 22, 53, 80, 443, 7999, 8000, 8050, 8100, 8101, 65535} {
				for _, proto := range []uint8{tcp, udp} {
					wantAllow, wantRule := c.Network.Decide(a, port, proto)
					gotAllow, gotRule := decideEncoded(trie, gen, a, port, proto)
					if gotAllow != wantAllow || gotRule != wantRule {
						t.Fatalf("%s:%d/%d: encoded says allow=%v rule=%d, policy says allow=%v rule=%d",
							a, port, proto, gotAllow, gotRule, wantAllow, wantRule)
					}
				}
			}
		}
	}
	// the builtin metadata deny is a rule of its own, reported by id
	allow, rule := web.Network.Decide(netip.MustParseAddr("169.254.169.254"), 443, tcp)
	if r, ok := web.RuleByID(rule); allow || !ok || r.Field != "builtin" {
		t.Fatalf("metadata:443 = %v, rule %d (%+v); want a builtin deny", allow, rule, r)
	}
}

func TestEncodeRefuses(t *testing.T) {
	v6 := netip.MustParsePrefix("::ffff:10.0.0.0/104")
	entry := policy.NetEntry{Prefix: v6, PortLo: 1, PortHi: 2, Proto: policy.ProtoTCP, Allow: true, RuleID: 1}
	many := make([]policy.NetEntry, policy.MaxNetEntries+1)
	for i := range many {
		many[i] = entry
	}
	for _, tc := range []struct {
		name string
		pol  policy.NetPolicy
		want string
	}{
		{"ipv4 prefix", policy.NetPolicy{Prefixes: []policy.NetPrefix{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Entries: []policy.NetEntry{entry}}}}, "keyed by IPv6 prefixes"},
		{"zero prefix", policy.NetPolicy{Prefixes: []policy.NetPrefix{{}}}, "keyed by IPv6 prefixes"},
		{"too many entries", policy.NetPolicy{Prefixes: []policy.NetPrefix{{Prefix: v6, Entries: many}}}, "carries 65 entries, at most 64"},
		{"reversed ports", policy.NetPolicy{Prefixes: []policy.NetPrefix{{Prefix: v6, Entries: []policy.NetEntry{{PortLo: 9, PortHi: 1}}}}}, "reversed"},
		{"duplicate", policy.NetPolicy{Prefixes: []policy.NetPrefix{{Prefix: v6}, {Prefix: netip.MustParsePrefix("::ffff:10.1.0.0/104")}}}, "appears twice"},
		{"too many prefixes", policy.NetPolicy{Prefixes: make([]policy.NetPrefix, MaxPrefixes+1)}, "4097 prefixes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encodeTrie(&tc.pol, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, err := encodeSockets(&policy.NetPolicy{Sockets: make([]policy.SocketRule, MaxSocketRules+1)})
	if err == nil || !strings.Contains(err.Error(), "17 socket rules") {
		t.Fatalf("too many socket rules: err = %v", err)
	}
}

func TestEncodeSockets(t *testing.T) {
	c := compileNet(t, "enforce", "")
	v, err := encodeSockets(&c.Network)
	if err != nil {
		t.Fatal(err)
	}
	if int(v.N) != len(c.Network.Sockets) {
		t.Fatalf("n = %d, want %d", v.N, len(c.Network.Sockets))
	}
	// the kernel's rule: a listed family and type; the IP families only with TCP or UDP
	kernelAllows := func(fam, typ uint16) bool {
		for _, r := range v.R[:v.N] {
			if r.Family == fam && (r.Type == 0 || r.Type == typ) {
				return true
			}
		}
		return false
	}
	for _, s := range []struct {
		fam, typ uint16
		want     bool
	}{
		{unix.AF_INET, unix.SOCK_STREAM, true},
		{unix.AF_INET6, unix.SOCK_DGRAM, true},
		{unix.AF_INET, unix.SOCK_RAW, false},
		{unix.AF_INET6, unix.SOCK_RAW, false},
		{unix.AF_PACKET, unix.SOCK_RAW, false},
		{unix.AF_NETLINK, unix.SOCK_RAW, false},
		{unix.AF_UNIX, unix.SOCK_STREAM, true},
	} {
		if got := kernelAllows(s.fam, s.typ); got != s.want || got != c.Network.SocketAllowed(s.fam, int(s.typ)) {
			t.Errorf("socket(%d, %d): encoded %v, policy %v, want %v", s.fam, s.typ, got, c.Network.SocketAllowed(s.fam, int(s.typ)), s.want)
		}
	}
}

// The constants of berm.h this package relies on, against their Go mirrors.
func TestContract(t *testing.T) {
	src, err := os.ReadFile("../../bpf/lib/berm.h")
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) int {
		m := regexp.MustCompile(`(?m)^#define ` + name + `\s+(\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s not in berm.h", name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	var pv bpf.WireBermNetPrefix
	var sv bpf.WireBermNetSocks
	for _, c := range []struct {
		name string
		got  int
	}{
		{"BERM_MAX_NET_ENTRIES", policy.MaxNetEntries},
		{"BERM_MAX_NET_ENTRIES", len(pv.E)},
		{"BERM_MAX_NET_PREFIXES", MaxPrefixes},
		{"BERM_NET_GEN_BITS", GenBits},
		{"BERM_MAX_SOCK_RULES", MaxSocketRules},
		{"BERM_MAX_SOCK_RULES", len(sv.R)},
		{"BERM_CALL_AUDIT", tracer.CallAudit},
		{"BERM_NR_SOCKET", unix.SYS_SOCKET},
		{"BERM_DNS_PIN_RULES", MaxPinRules},
	} {
		if want := def(c.name); c.got != want {
			t.Errorf("%s = %d in berm.h, %d in Go", c.name, want, c.got)
		}
	}
}
