package collector

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// oddEvents are events with what a realistic journal rarely has: escapes, non-ASCII,
// extreme numbers, every omitempty member set, several parts, none, times with offsets.
func oddEvents() []event.Event {
	at := time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.FixedZone("", 5*3600+30*60))
	base := event.Event{CallID: "odd-1", Time: at, Kind: event.KindOpen, UID: 0}
	ev := func(seq uint64, mod func(e *event.Event)) event.Event {
		e := base
		e.Seq = seq
		mod(&e)
		return e
	}
	return []event.Event{
		ev(1, func(e *event.Event) {
			e.Tool, e.Tenant, e.Comm = "sh && <b>", "ténant \u2028", "c\x01\t\"\\/"
			e.Open = &event.Open{Path: "/tmp/é/\u2029/日本", Dirfd: math.MinInt32, Flags: math.MaxUint32, Mode: 0o600, Result: math.MinInt64, Errno: "E&"}
		}),
		ev(2, func(e *event.Event) {
			e.Kind, e.PID, e.TID, e.PPID, e.UID = event.KindExec, math.MaxUint32, 1, 2, math.MaxUint32
			e.Exec = &event.Exec{Filename: "/bin/sh", Argv: []string{"sh", "-c", "a && b > c", "", "\x7f\u00ff"}, Truncated: true, Mode: 0o4755, Setuid: true, Deleted: true, ExeName: "memfd:x", EUID: 0}
		}),
		ev(3, func(e *event.Event) {
			e.Kind, e.Exec = event.KindExec, &event.Exec{Filename: "", Argv: nil}
		}),
		ev(4, func(e *event.Event) {
			e.Kind, e.Exec = event.KindExec, &event.Exec{Argv: []string{}}
		}),
		ev(5, func(e *event.Event) {
			e.Kind, e.Syscall = event.KindSyscall, &event.Syscall{Nr: 165, Name: "mount", Args: [6]uint64{math.MaxUint64, 0, 1, 1 << 63, 10, 9999999999999999999}, Path: "/a", Path2: "/b", Result: -1, Errno: "EPERM"}
		}),
		ev(6, func(e *event.Event) {
			e.Kind, e.Syscall = event.KindSyscall, &event.Syscall{Name: "getpid"}
		}),
		ev(7, func(e *event.Event) {
			e.Kind, e.Denial = event.KindDenial, &event.Denial{Layer: "seccomp", Surface: "policy", Rule: "r", Object: "", Audit: true}
		}),
		ev(8, func(e *event.Event) {
			e.Kind, e.Alert = event.KindAlert, &event.Alert{RuleID: "x", Technique: []string{"T1", "T2"}, EventSeq: math.MaxUint64}
		}),
		ev(9, func(e *event.Event) {
			e.Kind, e.Alert = event.KindAlert, &event.Alert{Technique: []string{}}
		}),
		ev(10, func(e *event.Event) { e.Kind, e.Drop = event.KindDrop, &event.Drop{Kernel: 1, User: math.MaxUint64} }),
		ev(11, func(e *event.Event) {
			e.Kind, e.Limit = event.KindLimit, &event.Limit{Resource: "memory", Limit: math.MaxInt64, Detail: "oom"}
		}),
		ev(12, func(e *event.Event) { e.Kind, e.Limit = event.KindLimit, &event.Limit{} }),
		ev(13, func(e *event.Event) { e.Kind, e.Exit = event.KindExit, &event.Exit{Code: -1, Signal: 15} }),
		ev(14, func(e *event.Event) { e.Kind, e.Exit = event.KindExit, &event.Exit{} }),
		ev(15, func(e *event.Event) { e.Kind, e.Fork = event.KindFork, &event.Fork{} }),
		ev(16, func(e *event.Event) {
			e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "inet6", Addr: "fe80::1%eth0", Port: 65535}
		}),
		ev(17, func(e *event.Event) {
			e.Kind, e.Connect = event.KindConnect, &event.Connect{Family: "10", Addr: "@abstract"}
		}),
		ev(18, func(e *event.Event) { e.Kind = "" }), // no part at all
		ev(19, func(e *event.Event) {
			// Several parts: the columns come from the first in rowOf's order.
			e.Kind = event.KindAlert
			e.Exec = &event.Exec{Filename: "/x"}
			e.Open = &event.Open{Path: "/y"}
			e.Alert = &event.Alert{RuleID: "r"}
			e.Limit = &event.Limit{Resource: "pids"}
		}),
		ev(20, func(e *event.Event) { e.Time = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC) }),
		ev(22, func(e *event.Event) {
			e.Phase = "setup"
			e.Open = &event.Open{Path: "/a/\x1b[2K", Result: 3, PathTruncated: true, PathLen: 4096, PathSource: "kernel", ResolvedPath: "/ws/a\n"}
		}),
		ev(23, func(e *event.Event) {
			e.Kind, e.Exec = event.KindExec, &event.Exec{Filename: "/bin/x", Argv: []string{"x"}, Truncated: true, ArgsLen: 1 << 20}
		}),
		ev(24, func(e *event.Event) {
			e.Kind, e.Reload = event.KindReload, &event.Reload{Surface: "network", Applied: true, Detail: "network policy reloaded", Generation: math.MaxUint64}
		}),
		ev(25, func(e *event.Event) { e.Kind, e.Reload = event.KindReload, &event.Reload{} }),
		ev(26, func(e *event.Event) {
			e.Kind, e.DNS = event.KindDNS, &event.DNS{Name: "a\"b.example", Type: "TYPE65", Rcode: "SERVFAIL", Verdict: event.DNSAuditRefused,
				Answers: []string{"::1", "127.0.0.1"}, CNAMEs: []string{"x.example"}, TTL: math.MaxUint32, Transport: "udp", Detail: "upstream: i/o timeout"}
		}),
		ev(27, func(e *event.Event) { e.Kind, e.DNS = event.KindDNS, &event.DNS{} }),
		ev(21, func(e *event.Event) {
			e.Time = time.Date(2024, 2, 29, 23, 59, 59, 1, time.FixedZone("", -(12*3600+45*60)))
		}),
	}
}

// journalRecords writes events with the journal's writer and returns the records' payloads.
func journalRecords(t testing.TB, write func(w *journal.Writer)) []string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "journal")
	w, err := journal.OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	write(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out []string
	if _, err := journal.Scan(dir, journal.Position{}, func(r journal.Record) error {
		if r.Type == journal.TypeEvents {
			out = append(out, string(r.Payload))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameRows checks the scanner against the general decoder on one record: if the scanner takes
// it, the general way gives the very same rows, details byte for byte.
func sameRows(t testing.TB, payload string) (scanned bool) {
	t.Helper()
	rows, ok := scanEvents(payload, nil)
	if !ok {
		return false
	}
	want, err := decodeEvents(payload)
	if err != nil {
		t.Fatalf("scanner took a record the general decoder rejects (%v):\n%s", err, payload)
	}
	if len(rows) != len(want) {
		t.Fatalf("scanner: %d rows, general: %d\n%s", len(rows), len(want), payload)
	}
	for i := range rows {
		if !reflect.DeepEqual(rows[i], want[i]) {
			t.Fatalf("row %d differs\nscanner %+v\ngeneral %+v\nalert %+v vs %+v\n%s", i, rows[i], want[i], rows[i].alert, want[i].alert, payload)
		}
	}
	return true
}

// The journal's writer gives the scanner every record, realistic and odd, and it reads them
// as the general way does.
func TestScanEventsSameAsGeneral(t *testing.T) {
	state := t.TempDir()
	writeCalls(t, state, "scan", 7, 300, 25, true)
	var recs []string
	if _, err := journal.Scan(filepath.Join(state, "journal"), journal.Position{}, func(r journal.Record) error {
		if r.Type == journal.TypeEvents {
			recs = append(recs, string(r.Payload))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	odd := oddEvents()
	recs = append(recs, journalRecords(t, func(w *journal.Writer) {
		if err := w.AppendEvents(odd); err != nil {
			t.Fatal(err)
		}
		for i := range odd {
			if err := w.AppendEvents(odd[i : i+1]); err != nil {
				t.Fatal(err)
			}
		}
	})...)
	recs = append(recs, "[]")
	for i, r := range recs {
		if !sameRows(t, r) {
			t.Errorf("record %d not taken by the scanner (the general way is several times slower):\n%s", i, r)
		}
	}
	// A decoded reused record after record, as the collector does, gives the same rows.
	d := &decoded{}
	for _, r := range append(recs, `[`, recs[0], `{}`, recs[len(recs)-2]) {
		*d = decoded{typ: journal.TypeEvents, raw: r, events: d.events[:0]}
		d.decode()
		want, err := decodeEvents(r)
		if (err == nil) != (d.err == nil) || !reflect.DeepEqual(d.events, want) && len(want)+len(d.events) > 0 {
			t.Fatalf("reused decoded: %v rows, err %v; want %v rows, err %v\n%s", len(d.events), d.err, len(want), err, r)
		}
	}
}

// Text in another form than the writer's goes the general way.
func TestScanEventsRefusesOtherForms(t *testing.T) {
	recs := journalRecords(t, func(w *journal.Writer) {
		if err := w.AppendEvents([]event.Event{makeEvent("c-1", 0, 9, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC))}); err != nil {
			t.Fatal(err)
		}
	})
	good := recs[0]
	if !strings.Contains(good, `"open":{"path":"/etc/passwd","dirfd":-100,"flags":524288,"result":4}`) {
		t.Fatalf("test record changed: %s", good)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"space", `"seq":9`, `"seq": 9`},
		{"newline at end", `}]`, "}]\n"},
		{"members reordered", `"dirfd":-100,"flags":524288`, `"flags":524288,"dirfd":-100`},
		{"unknown member", `"result":4}`, `"result":4,"extra":1}`},
		{"unknown top-level member", `"uid":1000`, `"uid":1000,"gid":5`},
		{"member in another case", `"path":`, `"Path":`},
		{"duplicate member", `"result":4}`, `"result":4,"result":5}`},
		{"empty omitempty string", `"result":4}`, `"result":4,"errno":""}`},
		{"zero omitempty number", `"flags":524288,`, `"flags":524288,"mode":0,`},
		{"required member missing", `"dirfd":-100,`, ``},
		{"null part", `"open":{"path":"/etc/passwd","dirfd":-100,"flags":524288,"result":4}`, `"open":null`},
		{"fraction", `"result":4}`, `"result":4.0}`},
		{"exponent", `"result":4}`, `"result":4e0}`},
		{"leading zero", `"result":4}`, `"result":04}`},
		{"minus zero", `"result":4}`, `"result":-0}`},
		{"overflow", `"flags":524288`, `"flags":4294967296`},
		{"negative unsigned", `"seq":9`, `"seq":-9`},
		{"unescaped <", `/etc/passwd`, `/etc/<passwd`},
		{"invalid utf-8", `/etc/passwd`, "/etc/\xffpasswd"},
		{"unescaped U+2028", `/etc/passwd`, "/etc/\u2028passwd"},
		{"escape the writer does not use", `/etc/passwd`, `/etc/\u0070asswd`},
		{"escaped slash", `/etc/passwd`, `\/etc/passwd`},
		{"escape in time", `"time":"2025`, `"time":"\u0032025`},
		{"bad time", `"time":"2025-01-02T03:04:05.000000006Z"`, `"time":"2025-13-02T03:04:05Z"`},
		{"trailing garbage", `}]`, `}]x`},
		{"trailing comma", `}]`, `},]`},
		{"null record", good, `null`},
		{"not an array", good, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("%q not in %s", tc.old, good)
			}
			r := strings.Replace(good, tc.old, tc.new, 1)
			if _, ok := scanEvents(r, nil); ok {
				t.Fatalf("scanner took %s", r)
			}
			// The general way still decodes what is valid JSON, as before.
			d := &decoded{typ: journal.TypeEvents, raw: r}
			d.decode()
			if _, err := decodeEvents(r); (err == nil) != (d.err == nil) {
				t.Fatalf("decodeRecord and decodeEvents disagree: %v vs %v", d.err, err)
			}
		})
	}
}

// A string is taken as it stands exactly when the writer writes it so.
func TestScannerStrings(t *testing.T) {
	try := func(v string) {
		enc, err := gojson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{string(enc), `"` + v + `"`} {
			sc := scanner{s: text}
			got := sc.str()
			ok := !sc.bad && sc.i == len(text)
			var w string
			err := gojson.Unmarshal([]byte(text), &w)
			back, _ := gojson.Marshal(w)
			if want := err == nil && string(back) == text; ok != want || (ok && got != w) {
				t.Fatalf("%q as %s: took %v (%q), want %v (%q)", v, text, ok, got, want, w)
			}
		}
	}
	for r := rune(0); r < 0x30000; r++ {
		try("a" + string(r) + "b")
	}
	for c := 0x80; c < 0x100; c++ {
		try("a" + string([]byte{byte(c)}) + "b")
	}
	for _, v := range []string{"", "\\", `"`, "a\\\"b", "\xed\xa0\x80", "\U0010ffff"} {
		try(v)
	}
}

// The scanner parses times as time.Time's UnmarshalJSON does, on text that a newer Go with
// RFC 3339 strictness enabled again (go.dev/issue/54580) would treat differently.
func TestScannerTime(t *testing.T) {
	for _, v := range []string{
		"2025-03-14T09:26:53.589793238Z", "2025-03-14T09:26:53Z", "2025-03-14T09:26:53+05:30",
		"2025-03-14T09:26:53.1-00:00", "2025-03-14T9:26:53Z", "2025-03-14T09:26:53,5Z",
		"2025-03-14T09:26:53+24:00", "2025-03-14T09:26:53+01:60", "2025-02-29T00:00:00Z",
		"2025-03-14t09:26:53z", "2025-03-14 09:26:53Z", "0000-01-01T00:00:00Z", "",
		"2025-03-14T09:26:53.5Z", "2025-03-14T09:26:53.000000001Z", "2025-03-14T09:26:53.1234567891Z",
		"2025-03-14T09:26:53.Z", "2025-03-14T09:26:53.-1Z", "2000-02-29T00:00:00Z", "2100-02-29T00:00:00Z",
		"2025-04-31T00:00:00Z", "2025-00-10T00:00:00Z", "2025-03-00T00:00:00Z", "2025-03-14T24:00:00Z",
		"2025-03-14T23:60:00Z", "2025-03-14T23:59:60Z", "+025-03-14T23:59:59Z", "2025-03-14T23:59:5aZ",
		"2025-03-14T09:26:53\\u005a", "9999-12-31T23:59:59.999999999Z",
	} {
		var want time.Time
		wantErr := want.UnmarshalJSON([]byte(`"` + v + `"`))
		sc := scanner{s: `"` + v + `"`}
		got := sc.time()
		if sc.bad != (wantErr != nil) || !got.Equal(want) {
			t.Errorf("%q: scanner %v (failed %v), UnmarshalJSON %v (%v)", v, got, sc.bad, want, wantErr)
		}
	}
	// Every instant as the writer writes it, in UTC and with an offset.
	at := time.Date(1999, 12, 31, 23, 59, 59, 0, time.UTC)
	for k := 0; k < 20000; k++ {
		at = at.Add(time.Duration(k%100)*7919*time.Second + time.Duration(k*104729))
		for _, tt := range []time.Time{at, at.In(time.FixedZone("", -3*3600-30*60))} {
			v := tt.Format(time.RFC3339Nano)
			sc := scanner{s: `"` + v + `"`}
			if got := sc.time(); sc.bad || !got.Equal(tt) {
				t.Fatalf("%q: scanner %v (failed %v)", v, got, sc.bad)
			}
		}
	}
}

func TestScannerIntegers(t *testing.T) {
	for _, tc := range []struct {
		text string
		max  uint64
		ok   bool
	}{
		{"0", 0, true}, {"18446744073709551615", math.MaxUint64, true},
		{"18446744073709551616", math.MaxUint64, false}, {"99999999999999999999", math.MaxUint64, false},
		{"4294967295", math.MaxUint32, true}, {"4294967296", math.MaxUint32, false},
		{"", math.MaxUint64, false}, {"-", math.MaxUint64, false}, {"-1", math.MaxUint64, false},
		{"00", math.MaxUint64, false}, {"1.5", math.MaxUint64, false},
	} {
		sc := scanner{s: tc.text}
		got := sc.unsigned(tc.max)
		if ok := !sc.bad && sc.i == len(tc.text); ok != tc.ok || (ok && fmt.Sprint(got) != tc.text) {
			t.Errorf("unsigned %q: %d (ok %v), want ok %v", tc.text, got, ok, tc.ok)
		}
	}
	for _, tc := range []struct {
		text string
		max  int64
		ok   bool
	}{
		{"-9223372036854775808", math.MaxInt64, true}, {"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775809", math.MaxInt64, false}, {"9223372036854775808", math.MaxInt64, false},
		{"-2147483648", math.MaxInt32, true}, {"-2147483649", math.MaxInt32, false}, {"-0", math.MaxInt64, false},
	} {
		sc := scanner{s: tc.text}
		got := sc.signed(tc.max)
		if ok := !sc.bad && sc.i == len(tc.text); ok != tc.ok || (ok && fmt.Sprint(got) != tc.text) {
			t.Errorf("signed %q: %d (ok %v), want ok %v", tc.text, got, ok, tc.ok)
		}
	}
}

// Whatever the text, the scanner takes it only if the general way reads it to the same rows.
//
//	go test -run '^$' -fuzz FuzzScanEvents ./collector/
func FuzzScanEvents(f *testing.F) {
	odd := oddEvents()
	for _, r := range journalRecords(f, func(w *journal.Writer) {
		for i := range odd {
			if err := w.AppendEvents(odd[i : i+1]); err != nil {
				f.Fatal(err)
			}
		}
		var evs []event.Event
		for seq := uint64(1); seq <= 20; seq++ {
			evs = append(evs, makeEvent("fz-1", 1, seq, time.Date(2025, 1, 2, 3, 4, 5, int(seq), time.UTC)))
		}
		if err := w.AppendEvents(evs); err != nil {
			f.Fatal(err)
		}
	}) {
		f.Add(r)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		sameRows(t, payload)
	})
}

// BenchmarkDecodeEvents compares the scanner with the general way on realistic records,
// without ClickHouse: the CPU each leaves to the server on a small machine.
func BenchmarkDecodeEvents(b *testing.B) {
	state := b.TempDir()
	writeCalls(b, state, "bench", 4, 1000, 100, false)
	var recs []string
	n := 0
	if _, err := journal.Scan(filepath.Join(state, "journal"), journal.Position{}, func(r journal.Record) error {
		if r.Type == journal.TypeEvents {
			recs = append(recs, string(r.Payload))
			n += strings.Count(string(r.Payload), `"call_id":`)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var reuse []eventRow // as the collector reuses its decoded records' rows
	for _, w := range []struct {
		name   string
		decode func(string) ([]eventRow, error)
	}{
		{"scanner", func(s string) ([]eventRow, error) {
			var ok bool
			if reuse, ok = scanEvents(s, reuse[:0]); !ok {
				return nil, fmt.Errorf("not taken")
			}
			return reuse, nil
		}},
		{"general", decodeEvents},
	} {
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range recs {
					if _, err := w.decode(r); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}
