package runcli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Invoke reads a bare invocation with Parse's flags in the caller's context: its environment
// and working directory as sent, never bermd's own.
func TestInvokeResolvesInTheCallersContext(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	os.MkdirAll(filepath.Join(real, "ws"), 0o755)
	os.Symlink(real, link)
	cwd, err := os.Open(real)
	if err != nil {
		t.Fatal(err)
	}
	defer cwd.Close()
	sock := filepath.Join(dir, "bermd.sock")
	own := func(p string) bool { return p == sock }
	os.Setenv("BERM_INVOKE_TEST_BERMD_ONLY", "bermd's")
	defer os.Unsetenv("BERM_INVOKE_TEST_BERMD_ONLY")

	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		fallback bool
		status   int
		stderr   string
		ws       string
		policy   string
		callEnv  string
	}{
		{name: "relative paths, $PWD naming the directory (Go's getwd)", args: []string{"--socket", sock, "--call-id", "c", "--workspace", "ws", "--policy", "p.yaml", "--env", "X", "--", "/bin/true"},
			env: []string{"PWD=" + link, "X=caller's"}, ws: filepath.Join(link, "ws"), policy: filepath.Join(link, "p.yaml"), callEnv: "X=caller's"},
		{name: "a stale $PWD is not used", args: []string{"--socket", sock, "--call-id", "c", "--workspace", "ws", "--", "/bin/true"},
			env: []string{"PWD=/"}, ws: filepath.Join(real, "ws")},
		{name: "the socket, relative", args: []string{"--socket", "../real/../bermd.sock", "--call-id", "c", "--workspace", "ws", "--", "/bin/true"},
			env: []string{"PWD=" + real}, ws: filepath.Join(real, "ws")},
		{name: "bermd's environment is not the caller's", args: []string{"--socket", sock, "--env", "BERM_INVOKE_TEST_BERMD_ONLY", "--", "/bin/true"},
			status: 1, stderr: "berm: --env: BERM_INVOKE_TEST_BERMD_ONLY is not set in the caller's environment\n"},
		{name: "a bad flag", args: []string{"--socket", sock, "--memory", "lots", "--", "/bin/true"},
			status: 2, stderr: `berm run: invalid value "lots" for flag -memory: expected a positive size like 512Mi, 1G or 65536, got "lots" (berm run -h lists the flags)` + "\n"},
		{name: "BERM_DAEMON as the caller has it", args: []string{"--socket", sock, "--", "/bin/true"}, env: []string{"BERM_DAEMON=sometimes"},
			status: 2, stderr: "berm run: --daemon (or BERM_DAEMON): expected auto, running, never or required, got \"sometimes\"\n"},
		{name: "a traceparent not in W3C's format", args: []string{"--socket", sock, "--traceparent", "00-xyz-01", "--", "/bin/true"},
			status: 2, stderr: `berm run: --traceparent: "00-xyz-01": expected 00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>` + "\n"},
		{name: "a traceparent with a terminal escape", args: []string{"--socket", sock, "--traceparent", "00-4bf92f3577b34da6a3ce929d0e0e473\x1b-00f067aa0ba902b7-01", "--", "/bin/true"},
			status: 2, stderr: `berm run: --traceparent: "00-4bf92f3577b34da6a3ce929d0e0e473\x1b-00f067aa0ba902b7-01": the trace id is not lowercase hex: expected 00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>` + "\n"},
		{name: "no command", args: []string{"--socket", sock}, status: 2, stderr: "berm run: no command; usage: berm run [flags] -- CMD [ARGS...]\n"},
		{name: "embedded: never", args: []string{"--socket", sock, "--daemon", "never", "--", "/bin/true"}, fallback: true},
		{name: "embedded: BERM_DAEMON=never", args: []string{"--socket", sock, "--", "/bin/true"}, env: []string{"BERM_DAEMON=never"}, fallback: true},
		{name: "embedded: a state dir", args: []string{"--socket", sock, "--state-dir", dir, "--", "/bin/true"}, fallback: true},
		{name: "another bermd's socket", args: []string{"--socket", sock + "2", "--", "/bin/true"}, fallback: true},
		{name: "the default socket, not this bermd's", args: []string{"--", "/bin/true"}, fallback: true},
		{name: "--messages, a file of the caller's: the Go front opens it", args: []string{"--socket", sock, "--messages", "m.log", "--", "/bin/true"}, fallback: true},
		{name: "--messages, a descriptor of the caller's, not bermd's to check", args: []string{"--socket", sock, "--messages", "977", "--", "/bin/true"}, fallback: true},
		{name: "--messages, a negative descriptor", args: []string{"--socket", sock, "--messages", "-3", "--", "/bin/true"},
			status: 2, stderr: "berm run: --messages: expected a file descriptor number or a file, got \"-3\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := Invoke(&callproto.Invocation{Args: tc.args, Env: tc.env, Cwd: cwd}, own)
			if fc.Cleanup != nil {
				defer fc.Cleanup()
			}
			if fc.Fallback != tc.fallback {
				t.Fatalf("fallback %v, want %v", fc.Fallback, tc.fallback)
			}
			if tc.fallback {
				return
			}
			if tc.stderr != "" || tc.status != 0 {
				if fc.Request != nil || fc.End.Status != tc.status || !strings.HasSuffix(string(fc.End.Stderr), tc.stderr) {
					t.Fatalf("end %d %q, want %d ending %q (request %v)", fc.End.Status, fc.End.Stderr, tc.status, tc.stderr, fc.Request)
				}
				return
			}
			r := fc.Request
			if r == nil {
				t.Fatalf("no request: %d %q", fc.End.Status, fc.End.Stderr)
			}
			if r.Workspace != tc.ws || r.PolicyFile != tc.policy {
				t.Fatalf("workspace %q policy %q, want %q %q", r.Workspace, r.PolicyFile, tc.ws, tc.policy)
			}
			if tc.callEnv != "" && r.Env[len(r.Env)-1] != tc.callEnv {
				t.Fatalf("env %q, want it to end with %q", r.Env, tc.callEnv)
			}
		})
	}
}

// The end of a call bermd ran: the same lines Finish prints, and the --summary bytes for the
// front to write (bermd writes no file for it).
func TestInvokeFinish(t *testing.T) {
	dir := t.TempDir()
	cwd, _ := os.Open(dir)
	defer cwd.Close()
	sock := filepath.Join(dir, "s")
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	fc := Invoke(&callproto.Invocation{Args: []string{"--socket", sock, "--call-id", "c1", "--workspace", ws, "--summary", "out.json", "--rules", "r", "--", "x"}, Cwd: cwd},
		func(p string) bool { return p == sock })
	if fc.Request == nil {
		t.Fatalf("no request: %q", fc.End.Stderr)
	}
	if !strings.Contains(string(fc.Early), "--rules and --no-rules are for the embedded agent") {
		t.Fatalf("early %q", fc.Early)
	}
	rec := &event.CallRecord{CallStart: event.CallStart{CallID: "c1"}, EndReason: event.EndTimeout, EndDetail: "wall time 1s", Dropped: event.Drop{Kernel: 2, User: 1}}
	end := fc.Finish(callproto.Reply{Record: rec, ExitStatus: 137, Warning: "journal full"})
	want := "berm: warning: journal full\nberm: call c1 ended: timeout (wall time 1s), status 137\nberm: call c1: 3 events were dropped (kernel 2, agent 1)\n"
	if end.Status != 137 || string(end.Stderr) != want || end.SummaryPath != "out.json" || !strings.HasPrefix(string(end.Summary), "{\n  \"call_id\": \"c1\"") {
		t.Fatalf("end %d %q %q %.40q", end.Status, end.Stderr, end.SummaryPath, end.Summary)
	}
	if end := fc.Finish(callproto.Reply{Error: "call id c1 is taken", ExitStatus: 125}); end.Status != 1 || string(end.Stderr) != "berm: call id c1 is taken\n" {
		t.Fatalf("a call that did not run: %d %q", end.Status, end.Stderr)
	}
}

// berm run -h through bermd (the C front hands it the invocation) is the usage and success;
// a bad flag is one line and exit 2, as through the Go front.
func TestInvokeHelpAndBadFlag(t *testing.T) {
	own := func(string) bool { return true }
	for _, c := range []struct {
		name   string
		args   []string
		status int
		want   string // stderr starts with it
		lines  int    // stderr's lines, when set
	}{
		{"-h", []string{"-h"}, 0, "usage: berm run [flags] -- CMD [ARGS...]\n", 0},
		{"--help after flags", []string{"--tool", "x", "--help"}, 0, "usage: berm run", 0},
		{"a bad flag", []string{"--bogus", "--", "true"}, 2, "berm run: flag provided but not defined: -bogus (berm run -h lists the flags)\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := Invoke(&callproto.Invocation{Args: c.args}, own)
			if fc.Request != nil || fc.Fallback || fc.End.Status != c.status || !strings.HasPrefix(string(fc.End.Stderr), c.want) {
				t.Fatalf("status %d, stderr %q (request %v, fallback %v); want %d, stderr starting %q", fc.End.Status, fc.End.Stderr, fc.Request, fc.Fallback, c.status, c.want)
			}
			if n := strings.Count(string(fc.End.Stderr), "\n"); c.lines > 0 && n != c.lines {
				t.Errorf("%d lines of stderr, want %d:\n%s", n, c.lines, fc.End.Stderr)
			}
		})
	}
}

// --quiet: the tool's stderr carries none of berm's lines about how the call ended; without
// it, a call berm ended says so there.
func TestInvokeQuietLeavesStderrToTheTool(t *testing.T) {
	dir := t.TempDir()
	cwd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cwd.Close()
	sock := filepath.Join(dir, "bermd.sock")
	own := func(p string) bool { return p == sock }
	rec := &event.CallRecord{CallStart: event.CallStart{CallID: "c"}, EndReason: event.EndTimeout, EndDetail: "wall-time cap of 1s", Dropped: event.Drop{Kernel: 2}}
	for _, c := range []struct {
		name  string
		quiet bool
	}{{"without --quiet", false}, {"with --quiet", true}} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--socket", sock, "--workspace", dir, "--", "/bin/true"}
			if c.quiet {
				args = append([]string{"--quiet"}, args...)
			}
			fc := Invoke(&callproto.Invocation{Args: args, Cwd: cwd}, own)
			if fc.Cleanup != nil {
				defer fc.Cleanup()
			}
			if fc.Request == nil || fc.Finish == nil {
				t.Fatalf("no call: %d %q", fc.End.Status, fc.End.Stderr)
			}
			fe := fc.Finish(callproto.Reply{Record: rec, ExitStatus: 137, Warning: "w"})
			if got := string(fe.Stderr); c.quiet != (got == "") || !c.quiet && !strings.Contains(got, "berm: call c ended: timeout") {
				t.Errorf("stderr %q (quiet %v)", got, c.quiet)
			}
			if fe.Status != 137 {
				t.Errorf("status %d, want the call's 137", fe.Status)
			}
		})
	}
}

// berm run --messages FD names a descriptor this process has open: one that is not is a
// usage error, not a silent loss of berm's lines.
func TestMessagesDescriptorMustBeOpen(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "m")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := strconv.Itoa(int(f.Fd()))
	for _, tc := range []struct {
		name, messages, stderr string
	}{
		{"an open descriptor", open, ""},
		{"a file", filepath.Join(t.TempDir(), "m.log"), ""},
		{"a closed descriptor", "977", "berm run: --messages: file descriptor 977 is not open\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb strings.Builder
			_, err := parseFor([]string{"--messages", tc.messages, "--", "true"}, Caller{Stderr: &errb, LookupEnv: os.LookupEnv, Getwd: os.Getwd})
			if (err != nil) != (tc.stderr != "") || errb.String() != tc.stderr {
				t.Fatalf("err %v, stderr %q; want %q", err, errb.String(), tc.stderr)
			}
		})
	}
}

// A symlink planted where --messages names its file is not followed: berm's lines go to
// stderr, the file it points at is untouched.
func TestMessagesFileIsNotASymlinksTarget(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "messages.log")
	if err := os.WriteFile(target, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	o := &Options{Messages: link}
	if w := o.MessageWriter(); w != os.Stderr {
		t.Fatalf("berm's lines go to %v, want stderr", w)
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Fatalf("the symlink's target changed: %q", b)
	}
}
