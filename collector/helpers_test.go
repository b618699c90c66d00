package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/collector/audit"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/testutil"
)

// sharedServer is one real clickhouse-server for the package's tests; each test uses its own
// database on it. Tests that kill the server start their own.
var (
	sharedOnce sync.Once
	shared     *chtest.Server
	sharedErr  error
)

func server(t testing.TB) *chtest.Server {
	t.Helper()
	testutil.Integration(t, "a real clickhouse-server")
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		shared, sharedErr = chtest.Start(ctx, chtest.Config{})
	})
	if sharedErr != nil {
		skipOrFail(t, sharedErr)
	}
	return shared
}

// skipOrFail: root can install clickhouse-server (chtest.Binary does), so only a test that is
// not root may skip for want of one.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	testutil.RequireRoot(t, fmt.Sprintf("a real clickhouse-server is needed (%v) and installing it", err))
	t.Fatalf("real clickhouse-server needed: %v", err)
}

// freshDB creates a database of its own for a test and returns its DSN.
func freshDB(t testing.TB, s *chtest.Server) string {
	t.Helper()
	name := fmt.Sprintf("t%d", time.Now().UnixNano())
	conn := connect(t, s.DSN("default"))
	if err := conn.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return s.DSN(name)
}

func connect(t testing.TB, dsn string) driver.Conn {
	t.Helper()
	opts, _, err := parseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func count(t testing.TB, conn driver.Conn, q string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// testLogger writes the collector's log into the test log and keeps it for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newCollector(t testing.TB, stateDir, dsn string, mod func(*Config)) (*Collector, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	cfg := Config{
		StateDir: stateDir, DSN: dsn, BatchRows: 5000, BatchInterval: 100 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, lb
}

// writeCalls writes calls with realistic events into the journal of stateDir: every kind,
// IPv4, IPv6 and unix connects, alerts, nil and empty slices, times with nanoseconds. Events
// go in records of perRecord, interleaved between calls as a busy agent writes them.
func writeCalls(t testing.TB, stateDir, prefix string, calls, eventsPerCall, perRecord int, finish bool) []string {
	t.Helper()
	w, err := journal.OpenWriter(filepath.Join(stateDir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	base := time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)
	var ids []string
	for c := 0; c < calls; c++ {
		id := fmt.Sprintf("%s-%04d", prefix, c)
		ids = append(ids, id)
		start := base.Add(time.Duration(c) * time.Second)
		s := &event.CallStart{
			CallID: id, Tool: []string{"web_fetch", "shell", "python"}[c%3], Tenant: []string{"acme", "globex"}[c%2],
			Argv: []string{"/bin/sh", "-c", "curl https://example.com | sha256sum"}, Policy: "default",
			PolicyHash: "sha256:0f3c", Start: start, CgroupID: uint64(4000 + c), Node: "node-1",
			Layers: []string{"landlock", "seccomp", "bpf-cgroup-sock"},
		}
		if c%4 == 3 {
			s.Layers = nil
		}
		if err := w.AppendCallStart(s); err != nil {
			t.Fatal(err)
		}
	}
	var counts = make([]event.Counts, calls)
	for seq := 1; seq <= eventsPerCall; seq += perRecord {
		for c, id := range ids {
			var evs []event.Event
			for k := seq; k < seq+perRecord && k <= eventsPerCall; k++ {
				e := makeEvent(id, c, uint64(k), base.Add(time.Duration(c)*time.Second+time.Duration(k)*time.Microsecond+time.Duration(k%7)))
				counts[c].Add(&e)
				evs = append(evs, e)
			}
			if err := w.AppendEvents(evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if finish {
		for c, id := range ids {
			start := base.Add(time.Duration(c) * time.Second)
			r := &event.CallRecord{
				CallStart: event.CallStart{
					CallID: id, Tool: []string{"web_fetch", "shell", "python"}[c%3], Tenant: []string{"acme", "globex"}[c%2],
					Argv: []string{"/bin/sh", "-c", "curl https://example.com | sha256sum"}, Policy: "default",
					Start: start, CgroupID: uint64(4000 + c), Node: "node-1", Layers: []string{"landlock"},
				},
				End: start.Add(1234567891 * time.Nanosecond), ExitStatus: 1, ExitCode: 1, EndReason: event.EndExit,
				Limits:    event.Limits{MemoryBytes: 512 << 20, Pids: 64, CPUs: 1.5, WallTime: 30 * time.Second},
				CPUTimeNs: 98765432, PeakMemory: 12 << 20, OutputBytes: 4096,
				Syscalls: map[string]uint64{"openat": 120, "read": 900, "connect": 2}, SyscallTotal: 1022,
				Counts: counts[c], Denials: map[string]uint64{"policy": 1}, Dropped: event.Drop{Kernel: 3, DNS: uint64(c)},
				Events: uint64(eventsPerCall),
			}
			if c%2 == 1 {
				r.Denials = nil
			}
			// Surfaces as policy.SurfaceStates gives them; a record of before surfaces (every
			// fifth) has none.
			if c%5 != 4 {
				r.Surfaces = policy.SurfaceStates(policy.SurfaceFacts{Layers: r.Layers, Caps: true, Complete: c%3 != 2, Denials: r.Denials})
			}
			if r.Complete = c%3 != 2; !r.Complete {
				r.IncompleteReason = "3 events lost in the kernel"
			}
			if err := w.AppendCallEnd(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

func makeEvent(callID string, c int, seq uint64, at time.Time) event.Event {
	e := event.Event{
		CallID: callID, Seq: seq, Time: at, Tool: []string{"web_fetch", "shell", "python"}[c%3],
		Tenant: []string{"acme", "globex"}[c%2], PID: uint32(1000 + c), TID: uint32(1000 + c + int(seq%3)),
		PPID: 999, UID: 1000, Comm: "curl", Exe: "/usr/bin/curl", ParentExe: "/bin/sh",
	}
	switch seq % 10 {
	case 0:
		e.Kind, e.Exec = event.KindExec, &event.Exec{Filename: "/usr/bin/curl", Argv: []string{"curl", "-s", "https://example.com"}, Mode: 0o755, ExeName: "curl"}
	case 1:
		e.Kind, e.Fork = event.KindFork, &event.Fork{ChildPID: uint32(2000 + seq)}
	case 2:
		e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "inet", Addr: "93.184.216.34", Port: 443}
	case 3:
		e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "inet6", Addr: "2606:2800:220:1:248:1893:25c8:1946", Port: 443, Result: -111, Errno: "ECONNREFUSED"}
	case 4:
		e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "unix", Addr: "/run/nscd/socket", Result: -2, Errno: "ENOENT"}
	case 5:
		e.Kind, e.Syscall = event.KindSyscall, &event.Syscall{Nr: 257, Name: "openat", Args: [6]uint64{0xffffff9c, 0x7ffd1234, 0x80000}, Path: "/etc/ld.so.cache", Result: 3}
	case 6:
		e.Kind, e.Denial = event.KindDenial, &event.Denial{Layer: "landlock", Surface: "policy", Rule: "fs.read", Object: "/home/user/.ssh/id_rsa"}
	case 7:
		e.Kind, e.Alert = event.KindAlert, &event.Alert{RuleID: "ssh-key-read", Title: "SSH private key read", Severity: "high", Surface: "credential", Technique: []string{"T1552.004"}, Output: "curl read ~/.ssh/id_rsa", EventSeq: seq - 1}
		if seq%20 == 17 {
			e.Alert.Technique = nil
		}
	case 8:
		e.Kind, e.Exit = event.KindExit, &event.Exit{Code: 0, Signal: 9}
	default:
		e.Kind, e.Open = event.KindOpen, &event.Open{Path: "/etc/passwd", Dirfd: -100, Flags: 0o2000000, Result: 4}
		if seq%100 == 19 {
			e.Open.PathSource, e.Open.ResolvedPath = "kernel", "/etc/passwd"
		}
		if seq%100 == 29 {
			e.Kind, e.Open = event.KindDNS, nil
			e.DNS = &event.DNS{Name: "api.github.com", Type: "A", Rcode: "NOERROR", Verdict: event.DNSAllowed, Rule: "spec.network.egress[0]",
				Answers: []string{"140.82.112.5", "140.82.112.6"}, CNAMEs: []string{"lb.github.com"}, TTL: 60, Transport: "udp"}
		}
		if seq%100 == 39 {
			e.Kind, e.Open = event.KindDNS, nil
			e.DNS = &event.DNS{Name: "exfil.example", Type: "TXT", Rcode: "REFUSED", Verdict: event.DNSRefused, Transport: "tcp"}
		}
	}
	if seq%100 == 59 {
		e.Kind, e.Open = event.KindApproval, nil
		e.Approval = &event.Approval{Outcome: "approved", ID: "a1b2c3d4e5f6", Action: "unlink", Syscall: "unlinkat", Object: "/ws/reports/a",
			Rule: "delete-reports", By: "alice", Channel: "api", Reason: "ok", LatencyNs: 1500000000, Result: 0, Approvers: []string{"oncall"}}
	}
	if seq%50 == 1 {
		e.Phase = "setup" // berm-init's own
	}
	return e
}

// roundTrip is a value after a JSON encode and decode, as a printer or an API would see it.
func roundTrip(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := reflect.New(reflect.TypeOf(v)).Interface()
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return reflect.ValueOf(out).Elem().Interface()
}

// sameAsJournal checks that ClickHouse gives the same calls and timelines as the journal.
func sameAsJournal(t testing.TB, stateDir, dsn string, wantCalls int) {
	t.Helper()
	src, err := OpenSource(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	jr := audit.Journal{Dir: filepath.Join(stateDir, "journal"), Log: slog.New(slog.DiscardHandler)}
	jcalls, err := jr.Calls(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	ccalls, err := src.Calls(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jcalls) != wantCalls || len(ccalls) != wantCalls {
		t.Fatalf("calls: journal %d, clickhouse %d, want %d", len(jcalls), len(ccalls), wantCalls)
	}
	if !reflect.DeepEqual(roundTrip(t, jcalls), roundTrip(t, ccalls)) {
		t.Fatalf("calls differ:\njournal    %+v\nclickhouse %+v", jcalls[0], ccalls[0])
	}
	for _, c := range jcalls {
		jc, jevs, err := jr.Timeline(c.Start.CallID)
		if err != nil {
			t.Fatal(err)
		}
		cc, cevs, err := src.Timeline(c.Start.CallID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(roundTrip(t, jc), roundTrip(t, cc)) {
			t.Fatalf("timeline call %s differs:\njournal    %+v\nclickhouse %+v", c.Start.CallID, jc, cc)
		}
		if len(jevs) != len(cevs) {
			t.Fatalf("timeline %s: journal %d events, clickhouse %d", c.Start.CallID, len(jevs), len(cevs))
		}
		if !reflect.DeepEqual(roundTrip(t, jevs), roundTrip(t, cevs)) {
			for i := range jevs {
				if !reflect.DeepEqual(roundTrip(t, jevs[i]), roundTrip(t, cevs[i])) {
					t.Fatalf("timeline %s event %d differs:\njournal    %+v\nclickhouse %+v", c.Start.CallID, i, jevs[i], cevs[i])
				}
			}
		}
	}
	// berm events reads the same stream from either store (every event, set-up included,
	// each call's in order; the journal interleaves calls as written, ClickHouse gives them call
	// by call, so each store's stream is compared per call).
	stream := func(es audit.EventSource) map[string][]event.Event {
		byCall := map[string][]event.Event{}
		if err := es.Events(context.Background(), audit.EventFilter{Setup: true}, false, func(e event.Event) error {
			byCall[e.Key()] = append(byCall[e.Key()], e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return byCall
	}
	js, cs := stream(jr), stream(src)
	if len(js) != wantCalls || !reflect.DeepEqual(roundTrip(t, js), roundTrip(t, cs)) {
		t.Fatalf("berm events: journal %d calls, clickhouse %d, or their events differ", len(js), len(cs))
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.Dir)
	}
	os.Exit(code)
}
