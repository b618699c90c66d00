package dnsguard

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/testenv/dnstest"
)

// pinLog keeps the pins the resolver asks for (the kernel side is netguard's, tested there).
type pinLog struct {
	mu   sync.Mutex
	pins []netip.Addr
}

func (p *pinLog) Pin(addr netip.Addr, _ []netguard.PinRule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pins = append(p.pins, addr)
	return nil
}

// A tool's query that gopacket's decoder panics on (found by FuzzQuery: 13 bytes, a record
// cut inside its fixed fields), sent over UDP and TCP to the call's resolver on its real
// sockets, is recorded as not a DNS query; the resolver (bermd, and every call in it) goes
// on, and answers the next query. A question whose label holds dots is refused unasked.
func TestMalformedQueriesDoNotEndTheResolver(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)}})
	r, err := New(Config{Upstream: up.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	var evs []*event.DNS
	pol := &policy.NetPolicy{Domains: []policy.DomainRule{{Pattern: "allowed.test", Ports: []policy.PortRange{{Lo: 443, Hi: 443}}, Proto: policy.ProtoTCP, Field: "spec.network.egress[0]", AllowPrivate: true}}}
	c, err := r.Attach(CallConfig{Name: "malformed", Policy: pol, Pins: &pinLog{}, Emit: func(e event.Event) {
		mu.Lock()
		evs = append(evs, e.DNS)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.Port())))
	hostile := []byte("\x00\xeb\x1b\x01\x00\x00\x00\x00\x00A\x01\f\x00")

	u, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write(hostile); err != nil {
		t.Fatal(err)
	}
	tc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := writeTCPMsg(tc, hostile); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := readTCPMsg(tc); err == nil {
		t.Fatal("a reply to a query that is not DNS")
	}

	// A question whose one label holds dots reads, dotted, as the allowed name; the upstream
	// would be asked another. It is refused unasked.
	dotted := []byte("\x00\x07\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x0callowed.test\x00\x00\x01\x00\x01")
	tc2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc2.Close()
	if err := writeTCPMsg(tc2, dotted); err != nil {
		t.Fatal(err)
	}
	tc2.SetReadDeadline(time.Now().Add(time.Minute))
	if b, err := readTCPMsg(tc2); err == nil {
		t.Fatalf("an answer to a one-label name read as allowed.test: %q", b)
	}

	// The resolver is still there: a real query is answered over UDP.
	q := dnsMsg(t, layers.DNS{ID: 99, RD: true, Questions: []layers.DNSQuestion{{Name: []byte("allowed.test"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}})
	var ans layers.DNS
	buf := make([]byte, 4096)
	for try := 0; ; try++ {
		if _, err := u.Write(q); err != nil {
			t.Fatal(err)
		}
		u.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := u.Read(buf)
		if err == nil {
			if err := decode(&ans, buf[:n]); err != nil {
				t.Fatal(err)
			}
			break
		}
		if try == 10 {
			t.Fatalf("no answer after the malformed queries: %v", err)
		}
	}
	if ans.ID != 99 || len(ans.Answers) != 1 || !net.IP(ans.Answers[0].IP).Equal(net.IPv4(127, 0, 0, 21)) {
		t.Fatalf("answer %+v", ans)
	}
	// Both malformed queries are in the call's record (the UDP one's goroutine may end after
	// the answer above: wait for it, as the call's end does).
	count := func() (int, []string) {
		mu.Lock()
		defer mu.Unlock()
		n, got := 0, []string{}
		for _, e := range evs {
			if e.Detail == "not a DNS query" {
				n++
			}
			got = append(got, e.Name+" "+e.Verdict+" "+e.Detail)
		}
		return n, got
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		n, got := count()
		if n == 2 {
			if !strings.Contains(strings.Join(got, "; "), "allowed.test refused question name not in plain form") {
				t.Fatalf("the one-label name not recorded as refused: %s", strings.Join(got, "; "))
			}
			break
		}
		if n > 2 || time.Now().After(deadline) {
			t.Fatalf("%d malformed queries recorded, want 2 (udp, tcp): %s", n, strings.Join(got, "; "))
		}
	}
	if n := up.Count("allowed.test"); n != 1 {
		t.Fatalf("the upstream was asked allowed.test %d times, want once (the plain query only)", n)
	}
}
