package dnsguard

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/dnstest"
)

// The test's names and where they point: loopback addresses only, each with a TCP listener.
func testZone() dnstest.Zone {
	return dnstest.Zone{
		"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)},
		"short.test":   {dnstest.A("short.test", "127.0.0.22", 1)},
		"alias.test":   {dnstest.CNAME("alias.test", "mid.test", 60)},
		"mid.test":     {dnstest.CNAME("mid.test", "end.cdn.test", 30)},
		"end.cdn.test": {dnstest.A("end.cdn.test", "127.0.0.23", 60)},
		"denied.test":  {dnstest.A("denied.test", "127.0.0.24", 60)},
		"other.test":   {dnstest.A("other.test", "127.0.0.25", 60)},
		// an answer section that also carries an address of another owner: not what was asked
		"stuffed.test": {dnstest.A("stuffed.test", "127.0.0.26", 60), dnstest.A("denied.test", "127.0.0.24", 60)},
	}
}

var targetAddrs = []string{"127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24", "127.0.0.25", "127.0.0.26"}

func domainPolicy(mode string, port int, extra string) string {
	return fmt.Sprintf(`spec:
  mode: %s
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: ["1-65535"], allowPrivate: true}
      - {domain: allowed.test, ports: ["1-65535"], protocol: udp, allowPrivate: true}
      - {domain: short.test, ports: [%d], allowPrivate: true}
      - {domain: alias.test, ports: [%d], allowPrivate: true}
      - {domain: stuffed.test, ports: [%d], allowPrivate: true}
      - {domain: other.test, ports: [%d], allowPrivate: true}
%s`, mode, port, port, port, port, extra)
}

// The server a tool names never matters: 127.0.0.99 has no DNS server, ::1:53 neither; the
// hooks send port 53 to the call's resolver.
const (
	nowhere  = "127.0.0.99"
	nowhere6 = "::1"
)

func TestDomainEgress(t *testing.T) {
	up := dnstest.Start(t, testZone())
	port := targets(t, targetAddrs...)
	n := newNode(t, Config{Upstream: up.Addr, Grace: 100 * time.Millisecond})
	pol := compile(t, domainPolicy("enforce", port, ""))
	P := fmt.Sprint(port)

	t.Run("allowed name connects, its address unresolved is refused", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"before tcp 127.0.0.21 "+P+" => EPERM",
			"lookup lookup udp "+nowhere+" allowed.test A => NOERROR:127.0.0.21",
			"after tcp 127.0.0.21 "+P+" => ok",
			"unresolved tcp 127.0.0.26 "+P+" => EPERM",
		)
		ev := c.dnsEvents()
		if len(ev) != 1 {
			t.Fatalf("dns events %+v, want 1", ev)
		}
		want := event.DNS{Name: "allowed.test", Type: "A", Rcode: "NOERROR", Verdict: event.DNSAllowed, Rule: "spec.network.egress[0]",
			Answers: []string{"127.0.0.21"}, TTL: 60, Transport: "udp"}
		if fmt.Sprint(ev[0]) != fmt.Sprint(want) {
			t.Errorf("event %+v\nwant  %+v", ev[0], want)
		}
	})

	t.Run("refused name", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"lookup lookup udp "+nowhere+" denied.test A => REFUSED:",
			"txt lookup tcp "+nowhere+" denied.test TXT => REFUSED:",
			"connect tcp 127.0.0.24 "+P+" => EPERM",
		)
		if got := up.Count("denied.test"); got != 0 {
			t.Errorf("the upstream was asked for a refused name %d times", got)
		}
		ev := c.dnsEvents()
		if len(ev) != 2 || ev[0].Verdict != event.DNSRefused || ev[0].Rcode != "REFUSED" || ev[0].Name != "denied.test" || ev[1].Type != "TXT" {
			t.Errorf("events %+v", ev)
		}
	})

	t.Run("CNAME chain", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"lookup lookup udp "+nowhere+" alias.test A => NOERROR:127.0.0.23",
			"connect tcp 127.0.0.23 "+P+" => ok",
			// the chain's end is pinned for alias.test's ports only
			"otherport tcp 127.0.0.23 "+fmt.Sprint(port+1)+" => EPERM",
		)
		ev := c.dnsEvents()
		if len(ev) != 1 || !slices.Equal(ev[0].CNAMEs, []string{"mid.test", "end.cdn.test"}) || ev[0].TTL != 30 {
			t.Errorf("events %+v", ev)
		}
	})

	t.Run("TCP DNS, connected UDP and IPv6 sockets", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"tcp lookup tcp "+nowhere+" allowed.test A => NOERROR:127.0.0.21",
			"connected lookup udpconn "+nowhere+" other.test A => NOERROR:127.0.0.25",
			"v6 lookup udp "+nowhere6+" alias.test A => NOERROR:127.0.0.23",
			"v6tcp lookup tcp "+nowhere6+" short.test A => NOERROR:127.0.0.22",
			"mapped lookup udp ::ffff:"+nowhere+" allowed.test A => NOERROR:127.0.0.21",
			"c1 tcp 127.0.0.21 "+P+" => ok",
			"c2 tcp 127.0.0.25 "+P+" => ok",
			"c3 tcp 127.0.0.23 "+P+" => ok",
			"c4 tcp 127.0.0.22 "+P+" => ok",
		)
		var transports []string
		for _, e := range c.dnsEvents() {
			transports = append(transports, e.Transport)
		}
		if !slices.Equal(transports, []string{"tcp", "udp", "udp", "tcp", "udp"}) {
			t.Errorf("transports %v", transports)
		}
	})

	t.Run("getpeername shows the address the tool connected to", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"tcp peer tcp "+nowhere+" 53 => "+nowhere+":53",
			"udp peer udp "+nowhere+" 53 => "+nowhere+":53",
			"tcp6 peer tcp "+nowhere6+" 53 => "+nowhere6+":53",
			"udp6 peer udp "+nowhere6+" 53 => "+nowhere6+":53",
			"mapped peer tcp ::ffff:"+nowhere+" 53 => "+nowhere+":53",
			// a socket berm did not redirect shows its real peer
			"lookup lookup udp "+nowhere+" allowed.test A => NOERROR:127.0.0.21",
			"real peer tcp 127.0.0.21 "+P+" => 127.0.0.21:"+P,
		)
	})

	t.Run("DoT and QUIC refused unless named", func(t *testing.T) {
		c := n.newCall(t, pol)
		// allowed.test's rules cover every port, TCP and UDP: 853 and UDP 443 are not named
		c.expect(t,
			"lookup lookup udp "+nowhere+" allowed.test A => NOERROR:127.0.0.21",
			"dot tcp 127.0.0.21 853 => EPERM",
			"dotudp udp 127.0.0.21 853 => EPERM",
			"quic udp 127.0.0.21 443 => EPERM",
			"udp udp 127.0.0.21 444 => ok",
			"tcp tcp 127.0.0.21 "+P+" => ok",
		)
	})

	t.Run("hostile answers and queries", func(t *testing.T) {
		c := n.newCall(t, pol)
		c.expect(t,
			"stuffed lookup udp "+nowhere+" stuffed.test A => NOERROR:127.0.0.26,127.0.0.24",
			"asked tcp 127.0.0.26 "+P+" => ok",
			"smuggled tcp 127.0.0.24 "+P+" => EPERM",
			// two questions in one query: one allowed name must not carry another
			"twoq lookup udp "+nowhere+" allowed.test A 2 => FORMERR:",
			"case lookup udp "+nowhere+" ALLOWED.Test A => NOERROR:127.0.0.21",
			"suffix lookup udp "+nowhere+" xallowed.test A => REFUSED:",
		)
	})
}

func TestPinExpiresInTheKernel(t *testing.T) {
	up := dnstest.Start(t, testZone())
	port := targets(t, targetAddrs...)
	// the cleaner never runs during the test: only the kernel's own expiry check can refuse
	n := newNode(t, Config{Upstream: up.Addr, Grace: 100 * time.Millisecond, GCInterval: time.Hour})
	c := n.newCall(t, compile(t, domainPolicy("enforce", port, "")))
	P := fmt.Sprint(port)
	c.expect(t,
		"lookup lookup udp "+nowhere+" short.test A => NOERROR:127.0.0.22",
		"fresh tcp 127.0.0.22 "+P+" => ok",
	)
	time.Sleep(1300 * time.Millisecond) // TTL 1s + grace 100ms, and a margin
	c.expect(t, "expired tcp 127.0.0.22 "+P+" => EPERM")
	if got := c.dns.pins.count(); got != 1 {
		t.Fatalf("pins before the cleaner: %d, want 1", got)
	}
	c.dns.pins.expire(time.Now())
	if got := c.dns.pins.count(); got != 0 {
		t.Errorf("pins after the cleaner: %d, want 0", got)
	}
	// resolving again opens it again
	c.expect(t,
		"again lookup udp "+nowhere+" short.test A => NOERROR:127.0.0.22",
		"reopened tcp 127.0.0.22 "+P+" => ok",
	)
}

func TestConcurrentCallsPins(t *testing.T) {
	up := dnstest.Start(t, testZone())
	port := targets(t, targetAddrs...)
	n := newNode(t, Config{Upstream: up.Addr})
	P := fmt.Sprint(port)
	a := n.newCall(t, compile(t, domainPolicy("enforce", port, "")))
	// b may send UDP to 127.0.0.1 on any port: even so, a's resolver is not b's to use
	b := n.newCall(t, compile(t, domainPolicy("enforce", port, `      - {cidr: 127.0.0.1/32, ports: ["1-65535"], protocol: udp}
`)))
	a.expect(t,
		"lookup lookup udp "+nowhere+" other.test A => NOERROR:127.0.0.25",
		"connect tcp 127.0.0.25 "+P+" => ok",
	)
	b.expect(t,
		"neighbours tcp 127.0.0.25 "+P+" => EPERM",
		"foreign udp 127.0.0.1 "+fmt.Sprint(a.dns.Port())+" => EPERM",
		"foreign6 udp ::1 "+fmt.Sprint(a.dns.Port())+" => EPERM",
		"own udp 127.0.0.1 "+fmt.Sprint(b.dns.Port())+" => ok",
		"lookup lookup udp "+nowhere+" other.test A => NOERROR:127.0.0.25",
		"mine tcp 127.0.0.25 "+P+" => ok",
	)
	if ev := a.dnsEvents(); len(ev) != 1 {
		t.Errorf("a's dns events %+v: b's datagrams must not reach a's resolver", ev)
	}
}

func TestAuditRecordsWouldBeRefusals(t *testing.T) {
	up := dnstest.Start(t, testZone())
	port := targets(t, targetAddrs...)
	n := newNode(t, Config{Upstream: up.Addr})
	c := n.newCall(t, compile(t, domainPolicy("audit", port, "")))
	P := fmt.Sprint(port)
	c.expect(t,
		"lookup lookup udp "+nowhere+" denied.test A => NOERROR:127.0.0.24",
		"connect tcp 127.0.0.24 "+P+" => ok",
	)
	ev := c.dnsEvents()
	if len(ev) != 1 || ev[0].Verdict != event.DNSAuditRefused || ev[0].Rcode != "NOERROR" || !slices.Equal(ev[0].Answers, []string{"127.0.0.24"}) {
		t.Errorf("events %+v", ev)
	}
	d := c.denials(1)
	found := false
	for _, x := range d {
		if x.Audit == 1 && x.Port == uint16(port) && x.Addr[12] == 127 && x.Addr[15] == 24 {
			found = true
		}
	}
	if !found {
		t.Errorf("no would-be denial of 127.0.0.24:%d in %+v", port, d)
	}
}

// A name the policy allows answered with the cloud metadata address (DNS rebinding): the pin
// must not open a builtin deny. The connect is made from a network namespace the child makes
// for itself (no route anywhere): allowed it would fail with ENETUNREACH, refused with EPERM,
// and no packet can leave either way.
func TestPinNeverOpensABuiltinDeny(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone{"meta.test": {dnstest.A("meta.test", "169.254.169.254", 60)}})
	n := newNode(t, Config{Upstream: up.Addr})
	c := n.newCall(t, compile(t, `spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: meta.test, ports: [80], allowPrivate: true}
      - {cidr: 127.0.0.1/32, ports: [80]}
`))
	c.expect(t,
		"lookup lookup udp "+nowhere+" meta.test A => NOERROR:169.254.169.254",
		"netns unsharenet => ok",
		"metadata tcp 169.254.169.254 80 => EPERM",
		// the control: what the hooks let through fails here with ENETUNREACH (loopback is down)
		"allowed tcp 127.0.0.1 80 => ENETUNREACH",
	)
}

// A call that floods its resolver with queries delays nobody else: its neighbour's lookups
// are answered and its pins work while the flood runs. And nothing of the flood goes
// unaccounted: every datagram it sent is a dns event of the flooder (answered, refused as
// over its in-flight bound, or read unanswered at its end) or counted in its Dropped (the
// kernel dropped it at the flooder's full socket).
func TestFloodStaysWithItsCall(t *testing.T) {
	up := dnstest.Start(t, testZone())
	port := targets(t, targetAddrs...)
	reg := prometheus.NewRegistry()
	n := newNode(t, Config{Upstream: up.Addr, Registry: reg})
	pol := compile(t, domainPolicy("enforce", port, ""))
	flooder, neighbour := n.newCall(t, pol), n.newCall(t, pol)
	backlogBefore := softnetDropped(t)
	done := make(chan map[string]string)
	go func() {
		done <- flooder.run(t, "a flood "+nowhere+" 40000", "b flood "+nowhere6+" 40000", "c flood "+nowhere+" 40000")
	}()
	neighbour.expect(t,
		"lookup lookup udp "+nowhere+" allowed.test A => NOERROR:127.0.0.21",
		"tcp lookup tcp "+nowhere+" other.test A => NOERROR:127.0.0.25",
		"c1 tcp 127.0.0.21 "+fmt.Sprint(port)+" => ok",
		"c2 tcp 127.0.0.25 "+fmt.Sprint(port)+" => ok",
	)
	got := <-done
	var sent uint64
	for _, k := range []string{"a", "b", "c"} {
		v, err := strconv.ParseUint(got[k], 10, 64)
		if err != nil || v == 0 {
			t.Fatalf("flood %s sent nothing: %v", k, got)
		}
		sent += v
	}
	if err := flooder.dns.Close(); err != nil {
		t.Fatal(err)
	}
	backlog := softnetDropped(t) - backlogBefore
	var recorded, overloaded, unread uint64
	for _, e := range flooder.dnsEvents() {
		if !strings.HasSuffix(e.Name, ".flood.test") {
			t.Errorf("the flooder recorded %+v", e)
			continue
		}
		recorded++
		switch {
		case strings.HasPrefix(e.Detail, "not asked: more than"):
			overloaded++
		case strings.HasPrefix(e.Detail, "not answered"):
			unread++
		}
	}
	dropped := flooder.dns.Dropped()
	t.Logf("flood: %d sent, %d recorded (%d over the in-flight bound, %d read at the end), %d dropped at the socket, %d dropped host-wide before any socket",
		sent, recorded, overloaded, unread, dropped, backlog)
	if dropped == 0 {
		t.Errorf("the flood of %d datagrams overflowed nothing: the test shows nothing about drops", sent)
	}
	// Datagrams dropped in the host's input backlog (softnet_stat) never reach a socket: no
	// socket's count has them. Nothing else on loopback may explain a difference.
	if recorded+dropped > sent || recorded+dropped+backlog < sent {
		t.Errorf("%d sent, but %d recorded + %d dropped (and %d lost host-wide before any socket)", sent, recorded, dropped, backlog)
	}
	if got := counter(t, reg, "berm_dns_queries_dropped_total"); got != float64(dropped) {
		t.Errorf("berm_dns_queries_dropped_total %v, the calls dropped %d", got, dropped)
	}
	nev := neighbour.dnsEvents()
	for _, e := range nev {
		if e.Name != "allowed.test" && e.Name != "other.test" || e.Rcode != "NOERROR" {
			t.Errorf("the neighbour recorded %+v", e)
		}
	}
	if len(nev) != 2 || neighbour.dns.Dropped() != 0 {
		t.Errorf("the neighbour's 2 queries: %d recorded, %d dropped", len(nev), neighbour.dns.Dropped())
	}
}

// softnetDropped is the host's count of packets dropped in its per-CPU input backlogs.
func softnetDropped(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			t.Fatalf("softnet_stat: %v", err)
		}
		sum += v
	}
	return sum
}

// DNS rebinding: names the policy allows, answered with internal addresses (loopback,
// private, link-local, CGNAT, unique-local, 0.0.0.0). Without allowPrivate on their rule the
// addresses leave the reply, are never pinned and the connect is refused; the public address
// beside one stays. The connects are made from a network namespace of the child's own (no
// route anywhere): allowed they fail with ENETUNREACH, refused with EPERM.
func TestRebindingToInternalAddressesIsWithheld(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone{
		"lo.test":          {dnstest.A("lo.test", "127.0.0.1", 60)},
		"ten.test":         {dnstest.A("ten.test", "10.0.0.7", 60)},
		"ll.test":          {dnstest.A("ll.test", "169.254.7.7", 60)},
		"cg.test":          {dnstest.A("cg.test", "100.64.0.7", 60)},
		"zero.test":        {dnstest.A("zero.test", "0.0.0.0", 60)},
		"ula.test":         {dnstest.A("ula.test", "fd00::7", 60)},
		"mixed.test":       {dnstest.A("mixed.test", "198.51.100.7", 60), dnstest.A("mixed.test", "192.168.1.7", 60)},
		"alias.test":       {dnstest.CNAME("alias.test", "inside.corp.test", 60)},
		"inside.corp.test": {dnstest.A("inside.corp.test", "172.16.0.7", 60)},
		"opt.test":         {dnstest.A("opt.test", "10.0.0.8", 60)},
	})
	n := newNode(t, Config{Upstream: up.Addr})
	c := n.newCall(t, compile(t, `spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: lo.test, ports: [80]}
      - {domain: ten.test, ports: [80]}
      - {domain: ll.test, ports: [80]}
      - {domain: cg.test, ports: [80]}
      - {domain: zero.test, ports: [80]}
      - {domain: ula.test, ports: [80]}
      - {domain: mixed.test, ports: [80]}
      - {domain: alias.test, ports: [80]}
      - {domain: opt.test, ports: [80], allowPrivate: true}
`))
	c.expect(t,
		"lo lookup udp "+nowhere+" lo.test A => NOERROR:",
		"ten lookup udp "+nowhere+" ten.test A => NOERROR:",
		"ll lookup tcp "+nowhere+" ll.test A => NOERROR:",
		"cg lookup udp "+nowhere+" cg.test A => NOERROR:",
		"zero lookup udp "+nowhere+" zero.test A => NOERROR:",
		"ula lookup udp "+nowhere+" ula.test AAAA => NOERROR:",
		"mixed lookup udp "+nowhere+" mixed.test A => NOERROR:198.51.100.7",
		"alias lookup udp "+nowhere+" alias.test A => NOERROR:",
		"opt lookup udp "+nowhere+" opt.test A => NOERROR:10.0.0.8",
		"netns unsharenet => ok",
		"c-lo tcp 127.0.0.1 80 => EPERM",
		"c-ten tcp 10.0.0.7 80 => EPERM",
		"c-ll tcp 169.254.7.7 80 => EPERM",
		"c-cg tcp 100.64.0.7 80 => EPERM",
		"c-zero tcp 0.0.0.0 80 => EPERM",
		"c-ula tcp fd00::7 80 => EPERM",
		"c-mixed-private tcp 192.168.1.7 80 => EPERM",
		"c-alias tcp 172.16.0.7 80 => EPERM",
		// the controls: what the hooks let through fails here with ENETUNREACH
		"c-mixed-public tcp 198.51.100.7 80 => ENETUNREACH",
		"c-opt tcp 10.0.0.8 80 => ENETUNREACH",
	)
	want := map[string]string{
		"lo.test": "withheld 127.0.0.1 (loopback)", "ten.test": "withheld 10.0.0.7 (private)",
		"ll.test": "withheld 169.254.7.7 (link-local)", "cg.test": "withheld 100.64.0.7 (cgnat)",
		"zero.test": "withheld 0.0.0.0 (this-network)", "ula.test": "withheld fd00::7 (unique-local)",
		"mixed.test": "withheld 192.168.1.7 (private)", "alias.test": "withheld 172.16.0.7 (private)",
		"opt.test": "",
	}
	ev := c.dnsEvents()
	if len(ev) != len(want) {
		t.Errorf("%d dns events, want %d: %+v", len(ev), len(want), ev)
	}
	for _, e := range ev {
		w, ok := want[e.Name]
		if !ok || !strings.HasPrefix(e.Detail, w) || e.Verdict != event.DNSAllowed || (w == "") != (len(e.Answers) == 1) && e.Name != "mixed.test" {
			t.Errorf("%s: %+v, want detail %q", e.Name, e, w)
		}
		if got := strings.Join(e.Internal, " "); w != "" && !strings.HasPrefix(w, "withheld "+got+" (") || w == "" && got != "" {
			t.Errorf("%s: internal %v, want those of %q", e.Name, e.Internal, w)
		}
	}
	if c.dns.Resolved().Has(netip.MustParseAddr("127.0.0.1")) {
		t.Error("a withheld address counts as resolved for the call")
	}
}

// In audit mode nothing is withheld: the answer passes, and the event says what enforcement
// would have withheld.
func TestRebindingInAuditModeIsRecorded(t *testing.T) {
	up := dnstest.Start(t, dnstest.Zone{"lo.test": {dnstest.A("lo.test", "127.0.0.1", 60)}})
	n := newNode(t, Config{Upstream: up.Addr})
	c := n.newCall(t, compile(t, `spec:
  mode: audit
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: lo.test, ports: [80]}
`))
	c.expect(t, "lo lookup udp "+nowhere+" lo.test A => NOERROR:127.0.0.1")
	ev := c.dnsEvents()
	if len(ev) != 1 || !strings.HasPrefix(ev[0].Detail, "audit: would withhold 127.0.0.1 (loopback)") || strings.Join(ev[0].Internal, " ") != "127.0.0.1" {
		t.Errorf("events %+v", ev)
	}
}

// counter is the value of a counter without labels in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
