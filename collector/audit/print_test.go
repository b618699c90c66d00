package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bermsec/berm/agent/event"
)

func TestSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain/path.txt", "plain/path.txt"},
		{"with space", "with space"},
		{"日本語 é", "日本語 é"},
		{"a\nb", `a\nb`},
		{"tab\there", `tab\there`},
		{"\r\a\b\f\v", `\r\a\b\f\v`},
		{"\033[2K\033[1A", `\033[2K\033[1A`},
		{"del\x7f", `del\177`},
		{"nul\x00", `nul\000`},
		{`back\slash`, `back\\slash`},
		{`\n literally`, `\\n literally`},
		{"bad\xffutf8\xc3", `bad\377utf8\303`},
		{"csi\u009b2J", `csi\302\2332J`},               // C1 CSI, a lone escape on some terminals
		{"rtl\u202eexe.txt", `rtl\342\200\256exe.txt`}, // bidi override
		{"line\u2028sep", `line\342\200\250sep`},
		{"\ufffd", "\ufffd"}, // a real replacement character is printable
		{"", ""},
	} {
		if got := Safe(tc.in); got != tc.want {
			t.Errorf("Safe(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// hostile are names a tool can give its files, each trying to break the table or the
// terminal that prints it.
var hostile = []string{
	"a\nb",
	"\033[2K\033[1A",
	"x\n42\t+0.000001\t1\tsh\topen\t/etc/shadow RDONLY -> 3",
	"\r\033]0;title\a",
	"c1\u009b2J",
	"bad\xff",
	"\x7f",
}

// noRawControl fails when out holds a byte a terminal acts on, but the newlines that end
// rows; lines is how many rows there must be.
func noRawControl(t *testing.T, out string, lines int) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("raw control byte %#x at %d:\n%s", c, i, out)
		}
	}
	if strings.Contains(out, "\u009b") || !utf8.ValidString(out) {
		t.Fatalf("raw C1 control or invalid UTF-8 in output:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n != lines {
		t.Fatalf("%d lines, want %d:\n%s", n, lines, out)
	}
}

func hostileCall() (*Call, []event.Event) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &Call{
		Start: event.CallStart{CallID: "id\n1", Tool: "to\033ol", Tenant: "te\rnant", Argv: hostile, Policy: "p\n",
			Start: start, Node: "n\x7f", Layers: []string{"l\n"}},
		Record: &event.CallRecord{End: start.Add(time.Second), EndReason: "exit\n", EndDetail: "d\033[2K",
			Syscalls: map[string]uint64{"s\n": 1}, IncompleteReason: "r\n"},
	}
	var evs []event.Event
	seq := uint64(0)
	add := func(e event.Event) {
		seq++
		e.Seq, e.Time, e.Comm, e.Exe = seq, start, "co\nmm", hostile[seq%uint64(len(hostile))]
		evs = append(evs, e)
	}
	for _, h := range hostile {
		add(event.Event{Kind: event.KindOpen, Open: &event.Open{Path: h, ResolvedPath: "/ws/" + h, Errno: h}})
		add(event.Event{Kind: event.KindExec, Phase: h, Exec: &event.Exec{Filename: h, Argv: []string{h, "ok"}, ExeName: h, Deleted: true}})
		add(event.Event{Kind: event.KindSyscall, Syscall: &event.Syscall{Name: h, Path: h, Path2: h}})
		add(event.Event{Kind: event.KindConnect, Connect: &event.Connect{Family: h, Addr: h}})
		add(event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: h, Object: h, Rule: h, Surface: h}})
		add(event.Event{Kind: event.KindAlert, Alert: &event.Alert{Severity: h, RuleID: h, Output: h}})
		add(event.Event{Kind: event.KindLimit, Limit: &event.Limit{Resource: h, Detail: h}})
		add(event.Event{Kind: event.KindReload, Reload: &event.Reload{Surface: h, Detail: h}})
		add(event.Event{Kind: event.KindCredential, Credential: &event.Credential{Name: h, Action: h, Fingerprint: h, Source: h, Delivery: h, Result: h, Where: h, Encoding: h, OtherCall: h, OtherTenant: h}})
		add(event.Event{Kind: event.KindMCP, MCP: &event.MCP{Phase: h, Method: h, Name: h, RequestID: h, Arguments: h, Status: h}})
		add(event.Event{Kind: event.Kind(h)})
	}
	return c, evs
}

// Every field the timeline prints is escaped: one line per event, whatever the names.
func TestPrintTimelineHostile(t *testing.T) {
	c, evs := hostileCall()
	var b bytes.Buffer
	if err := PrintTimeline(&b, c, evs); err != nil {
		t.Fatal(err)
	}
	// call, argv, started, layers, ended, complete, usage, top syscalls, counts, blank, header.
	noRawControl(t, b.String(), 11+len(evs))
	if !strings.Contains(b.String(), `x\n42\t+0.000001\t1\tsh\topen\t/etc/shadow RDONLY -> 3`) {
		t.Errorf("the forged row is not shown escaped:\n%s", b.String())
	}
}

func TestPrintCallsHostile(t *testing.T) {
	c, _ := hostileCall()
	running := Call{Start: c.Start}
	var b bytes.Buffer
	if err := PrintCalls(&b, []Call{*c, running}); err != nil {
		t.Fatal(err)
	}
	noRawControl(t, b.String(), 3)
}

// JSON output stays exact: the hostile names come back byte for byte (invalid UTF-8 as the
// journal stores it, with U+FFFD, as encoding/json writes it).
func TestPrintTimelineJSONExact(t *testing.T) {
	c, evs := hostileCall()
	var b bytes.Buffer
	if err := PrintTimelineJSON(&b, c, evs); err != nil {
		t.Fatal(err)
	}
	var back TimelineJSON
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if evs[i].Open != nil && back.Events[i].Open.Path != strings.ToValidUTF8(evs[i].Open.Path, "\ufffd") {
			t.Errorf("event %d: path %q, want %q", i, back.Events[i].Open.Path, evs[i].Open.Path)
		}
	}
	if back.Call.Start.CallID != c.Start.CallID || back.Call.Record.EndDetail != c.Record.EndDetail {
		t.Errorf("call changed in JSON: %+v", back.Call)
	}
}

// Every key of `berm calls --json` and `berm timeline --json` is snake_case.
func TestJSONKeysSnakeCase(t *testing.T) {
	c, evs := hostileCall()
	c.Record.Complete = true
	var b bytes.Buffer
	if err := PrintCallsJSON(&b, []Call{*c}); err != nil {
		t.Fatal(err)
	}
	if err := PrintTimelineJSON(&b, c, evs); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&b)
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		walkKeys(t, v)
	}
	if !strings.Contains(mustJSON(t, c), `"start":{"call_id":`) || !strings.Contains(mustJSON(t, c), `"complete":true`) {
		t.Errorf("call JSON: %s", mustJSON(t, c))
	}
}

func walkKeys(t *testing.T, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if k != strings.ToLower(k) || strings.ContainsAny(k, " -") {
				t.Errorf("JSON key %q is not snake_case", k)
			}
			// Maps of names (syscalls, denials) hold data, not keys of the schema.
			if k != "syscalls" && k != "denials" {
				walkKeys(t, sub)
			}
		}
	case []any:
		for _, sub := range x {
			walkKeys(t, sub)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDescribeNewFields(t *testing.T) {
	for _, tc := range []struct {
		e    event.Event
		want string
	}{
		{event.Event{Open: &event.Open{Path: "/a/b", PathTruncated: true, PathLen: 5000, PathSource: "user"}}, "/a/b [truncated, 5000 bytes] [path from user memory] RDONLY -> 0"},
		{event.Event{Open: &event.Open{Path: "passwd", ResolvedPath: "/etc/passwd", PathSource: "kernel"}}, "passwd (/etc/passwd) RDONLY -> 0"},
		{event.Event{Exec: &event.Exec{Filename: "/bin/x", Argv: []string{"x"}, Truncated: true, ArgsLen: 9000}}, "/bin/x [x] [argv truncated, 9000 bytes]"},
		{event.Event{Connect: &event.Connect{Family: "inet", Addr: "10.0.0.1", Port: 443, AddrSource: "kernel"}}, "inet 10.0.0.1:443 -> 0"},
		{event.Event{Connect: &event.Connect{Family: "inet", Addr: "10.0.0.1", Port: 443, AddrSource: "user"}}, "inet 10.0.0.1:443 [address from user memory] -> 0"},
		{event.Event{Connect: &event.Connect{Family: "unix", Addr: "s.sock", AddrSource: "user"}}, "unix s.sock -> 0"},
		{event.Event{Reload: &event.Reload{Surface: "network", Applied: true, Detail: "network policy reloaded", Generation: 2}}, "network policy reloaded (generation 2): network policy reloaded"},
		{event.Event{Reload: &event.Reload{Surface: "network", Detail: "bad yaml"}}, "network policy reload refused: bad yaml"},
	} {
		if got := Describe(&tc.e); got != tc.want {
			t.Errorf("Describe = %q, want %q", got, tc.want)
		}
	}
}

// A degraded surface's timeline says why: the missing layer and the rules it leaves
// unenforced, on a line of its own; an enforced one says nothing more.
func TestPrintTimelineSaysWhyASurfaceIsDegraded(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &Call{Start: event.CallStart{CallID: "c", Start: start}, Record: &event.CallRecord{End: start.Add(time.Second), Complete: true,
		Surfaces: []event.SurfaceState{
			{Surface: event.SurfaceIsolation, State: event.StateEnforced},
			{Surface: event.SurfacePolicy, State: event.StateDegraded, Reason: "bpf-lsm refused by the kernel: spec.filesystem's truncate rules are not enforced"},
		}}}
	var b bytes.Buffer
	if err := PrintTimeline(&b, c, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "\n  degraded policy: bpf-lsm refused by the kernel: spec.filesystem's truncate rules are not enforced\n") {
		t.Errorf("no reason for the degraded surface:\n%s", out)
	}
	if strings.Contains(out, "enforced isolation") {
		t.Errorf("a reason line for an enforced surface:\n%s", out)
	}
}
