package dnsguard

import (
	"bytes"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/testenv/dnstest"
)

// A tool asks an allowed name with data of its own around the question: EDNS options (a
// local option, a client subnet, a cookie, padding) holding secret bytes, the DO flag, the Z, AD and
// CD, an authority and an additional record, a mixed-case name. The real upstream records
// every message it receives: each one is berm's own (one lowercased question, a fresh ID, an
// OPT record with no options and no flags, nothing else) and holds none of the tool's bytes.
// The tool still gets its answer, with its ID and its question as it wrote it.
func TestUpstreamGetsOnlyTheQuestion(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)}})
	r, err := New(Config{Upstream: up.Addr, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pol := &policy.NetPolicy{Domains: []policy.DomainRule{{Pattern: "allowed.test", Ports: []policy.PortRange{{Lo: 443, Hi: 443}}, Proto: policy.ProtoTCP, Field: "spec.network.egress[0]", AllowPrivate: true}}}
	c, err := r.Attach(CallConfig{Name: "TestUpstreamGetsOnlyTheQuestion", Policy: pol, Pins: &pinLog{}, Emit: func(event.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.Port())))

	secrets := map[string][]byte{
		"local option":    []byte("SECRETlocal-0ption-bytes"),
		"client subnet":   append([]byte{0, 1, 32, 0}, []byte("SECRETsubnet")...),
		"cookie":          []byte("SECRETcookie-16b"),
		"padding":         []byte("SECRETpadding-content"),
		"additional":      []byte("SECRETadditional-txt"),
		"authority":       []byte("SECRETauthority-txt"),
		"additional name": []byte("secretadditionalname"),
	}
	tool := layers.DNS{ID: 0x4242, RD: true, Z: 7, // Z, AD and CD
		Questions:   []layers.DNSQuestion{{Name: []byte("AlLoWeD.TeSt"), Type: layers.DNSTypeA, Class: layers.DNSClassIN}},
		Authorities: []layers.DNSResourceRecord{{Name: []byte("allowed.test"), Type: layers.DNSTypeTXT, Class: layers.DNSClassIN, TTL: 1, TXTs: [][]byte{secrets["authority"]}}},
		Additionals: []layers.DNSResourceRecord{
			{Name: []byte(string(secrets["additional name"]) + ".test"), Type: layers.DNSTypeTXT, Class: layers.DNSClassIN, TTL: 1, TXTs: [][]byte{secrets["additional"]}},
			{Type: layers.DNSTypeOPT, Class: 4096, TTL: 0x8000, OPT: []layers.DNSOPT{ // DO set
				{Code: 65001, Data: secrets["local option"]},
				{Code: layers.DNSOptionCodeEDNSClientSubnet, Data: secrets["client subnet"]},
				{Code: layers.DNSOptionCodeCookie, Data: secrets["cookie"]},
				{Code: layers.DNSOptionCodePadding, Data: secrets["padding"]},
			}},
		},
	}
	q := dnsMsg(t, tool)

	check := func(t *testing.T, resp []byte) {
		var ans layers.DNS
		if err := decode(&ans, resp); err != nil {
			t.Fatal(err)
		}
		if ans.ID != 0x4242 || len(ans.Questions) != 1 || string(ans.Questions[0].Name) != "AlLoWeD.TeSt" ||
			len(ans.Answers) != 1 || !net.IP(ans.Answers[0].IP).Equal(net.IPv4(127, 0, 0, 21)) {
			t.Fatalf("the tool's answer %+v", ans)
		}
	}
	t.Run("over UDP", func(t *testing.T) {
		u, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		buf := make([]byte, 4096)
		for try := 0; ; try++ {
			u.Write(q)
			u.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := u.Read(buf)
			if err == nil {
				check(t, buf[:n])
				break
			}
			if try == 10 {
				t.Fatalf("no answer: %v", err)
			}
		}
	})
	t.Run("over TCP", func(t *testing.T) {
		tc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		if err := writeTCPMsg(tc, q); err != nil {
			t.Fatal(err)
		}
		tc.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := readTCPMsg(tc)
		if err != nil {
			t.Fatal(err)
		}
		check(t, resp)
	})

	got := up.Received()
	if len(got) == 0 {
		t.Fatal("the upstream received nothing")
	}
	ids := map[uint16]bool{}
	for i, m := range got {
		for what, s := range secrets {
			if bytes.Contains(bytes.ToLower(m), bytes.ToLower(s)) {
				t.Errorf("message %d reached the upstream with the tool's %s: %q", i, what, m)
			}
		}
		var d layers.DNS
		if err := decode(&d, m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		ids[d.ID] = true
		if d.Z != 0 || !d.RD || d.OpCode != layers.DNSOpCodeQuery {
			t.Errorf("message %d carries the tool's header bits: %+v", i, d)
		}
		if len(d.Questions) != 1 || string(d.Questions[0].Name) != "allowed.test" || len(d.Answers) != 0 || len(d.Authorities) != 0 {
			t.Errorf("message %d: questions %q, %d answers, %d authorities", i, d.Questions, len(d.Answers), len(d.Authorities))
		}
		if len(d.Additionals) != 1 || d.Additionals[0].Type != layers.DNSTypeOPT || len(d.Additionals[0].OPT) != 0 || d.Additionals[0].TTL != 0 ||
			d.Additionals[0].Class != ednsSize {
			t.Errorf("message %d: additionals %+v, want berm's OPT record alone", i, d.Additionals)
		}
	}
	if ids[0x4242] && len(ids) == 1 {
		t.Errorf("the upstream got the tool's query id")
	}
}
