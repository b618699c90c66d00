package sandboxer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
)

// The hostile tool: processes sending UDP queries without waiting for answers, to whatever
// server, until the test says stop; it prints how many datagrams the kernel took.
const floodScript = `import os, socket, struct
def q(i, n):
    name = b"".join(bytes([len(l)]) + l for l in (b"f%d" % n, b"w%d" % i, b"flood", b"test")) + b"\0"
    return struct.pack(">HHHHHH", n & 0xffff, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
def flood(i):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    sent = 0
    while sent < 3000000 and not os.path.exists("stop"):
        for _ in range(500):
            try:
                s.sendto(q(i, sent), ("192.0.2.53", 53))
                sent += 1
            except BlockingIOError:
                pass
    return sent
open("started", "w").close()
kids = []
for i in range(3):
    r, w = os.pipe()
    if os.fork() == 0:
        os.write(w, b"%d" % flood(i)); os._exit(0)
    os.close(w); kids.append(r)
total = sum(int(os.read(r, 64)) for r in kids)
for _ in kids: os.wait()
print(total)
`

// Its neighbour resolves and connects, many times, while the flood runs.
const neighbourScript = `import socket, sys
port = int(sys.argv[1])
ok = 0
for i in range(20):
    addr = socket.getaddrinfo("allowed.test", port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    s = socket.socket(); s.connect(addr); s.close(); ok += 1
print(ok)
`

// A call flooding its resolver with UDP queries, through bermd beside a neighbour call:
// every datagram the flood got into the kernel is in its trail (a dns event, whatever became
// of it) or counted in its record's dropped.dns, and the record says it is incomplete; the
// neighbour's lookups all succeed and are all recorded, its record complete.
func TestDNSFloodIsAccountedToItsCall(t *testing.T) {
	bermbin.RequireRoot(t)
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)}})
	target := listen(t, "tcp4", "127.0.0.21:0")
	P := port(target)
	pol := filepath.Join(t.TempDir(), "dns.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dns-flood}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: [%d], allowPrivate: true}
`, P)), 0o644); err != nil {
		t.Fatal(err)
	}
	socket, log := startBermd(t)
	state := filepath.Join(filepath.Dir(socket), "state")
	call := func(id, ws string, argv ...string) bermbin.Result {
		return bermbin.Berm(t, nil, append([]string{"run", "--socket", socket, "--daemon", "required", "--call-id", id,
			"--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--"}, argv...)...)
	}
	floodWS := bermbin.Workspace(t)
	flood := make(chan bermbin.Result)
	go func() { flood <- call("flooder", floodWS, "python3", "-c", floodScript) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(floodWS, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not start:\n%s", log)
		}
	}
	nb := call("neighbour", bermbin.Workspace(t), "python3", "-c", neighbourScript, fmt.Sprint(P))
	if err := os.WriteFile(filepath.Join(floodWS, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fr := <-flood
	if nb.Exit != 0 || strings.TrimSpace(nb.Stdout) != "20" {
		t.Errorf("neighbour: exit %d, %q %s", nb.Exit, nb.Stdout, nb.Stderr)
	}
	if fr.Exit != 0 {
		t.Fatalf("flooder: exit %d: %s %s", fr.Exit, fr.Stdout, fr.Stderr)
	}
	sent, err := strconv.ParseUint(strings.TrimSpace(fr.Stdout), 10, 64)
	if err != nil || sent == 0 {
		t.Fatalf("flooder sent %q", fr.Stdout)
	}

	ftl := bermbin.Timeline(t, state, "flooder")
	var recorded, overloaded, dnsEvents uint64
	for _, e := range ftl.Events {
		if e.Kind == event.KindDNS {
			dnsEvents++
		}
		if e.Kind == event.KindDNS && e.DNS != nil && strings.HasSuffix(e.DNS.Name, ".flood.test") {
			recorded++
			if strings.HasPrefix(e.DNS.Detail, "not asked: more than") {
				overloaded++
			}
		}
	}
	rec := ftl.Call.Record
	if rec == nil {
		t.Fatal("the flooder has no record")
	}
	d := rec.Dropped
	t.Logf("flood: %d sent, %d recorded (%d refused over the in-flight bound), dropped: %d at the socket, %d events in the agent, %d in the kernel; incomplete: %s",
		sent, recorded, overloaded, d.DNS, d.User, d.Kernel, rec.IncompleteReason)
	if d.DNS == 0 {
		t.Errorf("%d queries overflowed nothing: the test shows nothing about drops", sent)
	}
	if overloaded == 0 {
		t.Errorf("no query was refused over the in-flight bound")
	}
	// Events the agent lost (d.User) may be of any kind, dns events among them.
	if recorded+d.DNS > sent || recorded+d.DNS+d.User < sent {
		t.Errorf("%d sent, but %d recorded + %d dropped at the socket (+%d events lost in the agent)", sent, recorded, d.DNS, d.User)
	}
	// the record counts both: the queries recorded (the in-flight refusals among them) and
	// those the kernel dropped
	if rec.Counts.DNS != dnsEvents {
		t.Errorf("the flooder's record counts %d dns events, its trail has %d", rec.Counts.DNS, dnsEvents)
	}
	if rec.Complete || !strings.Contains(rec.IncompleteReason, fmt.Sprintf("%d dns queries dropped", d.DNS)) {
		t.Errorf("the flooder's record: complete=%v %q", rec.Complete, rec.IncompleteReason)
	}
	var dropEv *event.Drop
	for _, e := range ftl.Events {
		if e.Kind == event.KindDrop {
			dropEv = e.Drop
		}
	}
	if dropEv == nil || dropEv.DNS != d.DNS {
		t.Errorf("the flooder's trail has drop event %+v, its record %+v", dropEv, d)
	}

	ntl := bermbin.Timeline(t, state, "neighbour")
	var lookups int
	for _, e := range ntl.Events {
		if e.Kind == event.KindDNS && e.DNS != nil {
			if e.DNS.Name != "allowed.test" || e.DNS.Rcode != "NOERROR" || e.DNS.Verdict != event.DNSAllowed {
				t.Errorf("neighbour's dns event %+v", e.DNS)
			}
			lookups++
		}
	}
	if lookups != 20 {
		t.Errorf("the neighbour's 20 lookups: %d recorded", lookups)
	}
	if r := ntl.Call.Record; r == nil || !r.Complete || r.Dropped != (event.Drop{}) || r.Counts.DNS != 20 {
		t.Errorf("the neighbour's record: %+v", r)
	}
}
