package dnsguard

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/testenv/dnstest"
)

// query sends one A query for name over UDP to server and waits for its answer.
func query(b *testing.B, conn *net.UDPConn, name string) {
	q := layers.DNS{ID: uint16(rand.Uint32()), RD: true, Questions: []layers.DNSQuestion{{Name: []byte(name), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}}
	buf := gopacket.NewSerializeBuffer()
	if err := q.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		b.Fatal(err)
	}
	resp := make([]byte, 1500)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(resp)
	if err != nil {
		b.Fatal(err)
	}
	if n < 4 || resp[3]&0x0f != 0 {
		b.Fatalf("rcode %d", resp[3]&0x0f)
	}
}

// BenchmarkQuery: one allowed A query answered through the call's resolver (decode, policy
// match, upstream exchange, pin in the kernel's map, event) against the same query sent to
// the upstream directly; the ratio is the resolver's cost per query.
func BenchmarkQuery(b *testing.B) {
	up := dnstest.Start(b, testZone())
	n := newNode(b, Config{Upstream: up.Addr})
	c := n.newCall(b, compile(b, domainPolicy("enforce", 4000, "")))
	for _, bc := range []struct {
		name, addr string
	}{
		{"upstream-direct", up.Addr},
		{"via-resolver", fmt.Sprintf("127.0.0.1:%d", c.dns.Port())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ra, _ := net.ResolveUDPAddr("udp4", bc.addr)
			conn, err := net.DialUDP("udp4", nil, ra)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			for i := 0; i < b.N; i++ {
				query(b, conn, "allowed.test")
			}
		})
	}
}

// BenchmarkConnect: a TCP connect from inside a call to an address opened by the CIDR rules
// with no pins, against one opened by a pin while the call holds 1000 pinned addresses (the
// hooks' miss in the CIDR trie, then the pin lookup and its expiry check).
func BenchmarkConnect(b *testing.B) {
	port := targets(b, "127.0.0.1", "127.0.0.21")
	n := newNode(b, Config{Upstream: "127.0.0.1:9"})
	P := fmt.Sprint(port)
	none := n.newCall(b, compile(b, fmt.Sprintf(`spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {cidr: 127.0.0.1/32, ports: [%d]}
`, port)))
	pinned := n.newCall(b, compile(b, domainPolicy("enforce", port, "")))
	rule := pinned.pol.Network.Domains[2] // short.test's: the benchmark's port only
	until := time.Now().Add(time.Hour)
	for i := 0; i < 1000; i++ {
		addr := netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)})
		if i == 999 {
			addr = netip.MustParseAddr("127.0.0.21")
		}
		if err := pinned.pins().Pin(addr, []netguard.PinRule{{Until: until, Rule: rule.RuleID, PortLo: uint16(port), PortHi: uint16(port), Proto: policy.ProtoTCP}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		c    *call
		addr string
	}{
		{"cidr-no-pins", none, "127.0.0.1"},
		{"pinned-of-1000", pinned, "127.0.0.21"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			got := bc.c.run(b, "n connectloop "+bc.addr+" "+P+" "+fmt.Sprint(b.N))["n"]
			ns, err := strconv.ParseFloat(got, 64)
			if err != nil {
				b.Fatalf("child: %q", got)
			}
			b.ReportMetric(ns, "ns/connect")
		})
	}
}
