package csan

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/testenv/testutil"
)

// fakeBermd listens where the front is pointed (--socket), reads each bare invocation as
// bermd does (callproto.ReadInvocation) and answers with reply's bytes.
type fakeBermd struct {
	sock string
	l    *net.UnixListener
	got  chan invocation
}

type invocation struct {
	args, env []string
	fds       int
	err       error
}

func startBermd(t *testing.T, dir string, reply func(inv invocation) []byte) *fakeBermd {
	t.Helper()
	b := &fakeBermd{sock: filepath.Join(dir, "bermd.sock"), got: make(chan invocation, 1)}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: b.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	b.l = l
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			b.serve(c, reply)
		}
	}()
	return b
}

func (b *fakeBermd) serve(c *net.UnixConn, reply func(invocation) []byte) {
	defer c.Close()
	var inv invocation
	magic := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := c.ReadMsgUnix(magic, oob)
	if err == nil && (n != 1 || magic[0] != callproto.InvokeMagic) {
		err = fmt.Errorf("first byte %q, not the bare invocation's", magic[:n])
	}
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if fds, perr := unix.ParseUnixRights(&m); perr == nil {
				inv.fds += len(fds)
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}
	if err == nil {
		inv.args, inv.env, err = callproto.ReadInvocation(bufio.NewReader(c))
	}
	inv.err = err
	select {
	case b.got <- inv:
	default:
	}
	_, _ = c.Write(reply(inv))
}

// endFrame is callproto.WriteEndFrame's bytes.
func endFrame(e callproto.FrontEnd) []byte {
	var buf bytes.Buffer
	_ = callproto.WriteEndFrame(&buf, e)
	return buf.Bytes()
}

func stderrFrame(s string) []byte {
	var buf bytes.Buffer
	_ = callproto.WriteStderrFrame(&buf, []byte(s))
	return buf.Bytes()
}

// The front as a caller drives it, with argv and environments as large and as odd as execve
// passes: each reaches bermd exactly (the C front's encoding read by bermd's reader), and
// bermd's answer (stderr, status, the --summary file) reaches the caller, with no sanitizer
// report.
func TestFrontSendsHugeAndMalformedInvocationsIntact(t *testing.T) {
	testutil.RequireRoot(t, "the front hands a call to bermd only as root (else it runs the Go front)")
	dir := sanitized(t)
	front := filepath.Join(dir, "berm")

	big := strings.Repeat("A", maxArgStrlen-1)
	many := make([]string, 100_000)
	for i := range many {
		many[i] = hostileStrings[i%len(hostileStrings)]
		if len(many[i]) > 16 {
			many[i] = ""
		}
	}
	for _, tc := range []struct {
		name string
		args []string // after run --socket=...
		env  []string
	}{
		{"plain", []string{"--", "/bin/true"}, hostileEnv(4)},
		{"100k arguments", many, hostileEnv(4)},
		{"the largest single argument execve passes", []string{"--tool", big, "--", big}, hostileEnv(4)},
		{"10k environment entries, some without '='", []string{"--", "/bin/true"}, hostileEnv(10_000)},
		{"empty and invalid UTF-8 strings", hostileStrings, append(hostileEnv(4), hostileStrings...)},
		{"a --socket flag with no value last", []string{"--", "x", "--socket"}, hostileEnv(4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			summary := filepath.Join(tmp, "summary.json")
			b := startBermd(t, tmp, func(inv invocation) []byte {
				out := stderrFrame("early \xff warning\n")
				return append(out, endFrame(callproto.FrontEnd{Status: 7, Stderr: []byte("the end\n"), SummaryPath: summary, Summary: []byte("{}\n")})...)
			})
			args := append([]string{"--socket=" + b.sock}, tc.args...)
			_, wait := start(t, front, append([]string{"berm", "run"}, args...), tc.env)
			r := wait()
			checkClean(t, "berm run", r)
			inv := <-b.got
			if inv.err != nil {
				t.Fatalf("bermd read: %v", inv.err)
			}
			if inv.fds != 4 {
				t.Errorf("the front passed %d descriptors, want stdin, stdout, stderr and its directory", inv.fds)
			}
			if !slices.Equal(inv.args, args) {
				t.Errorf("bermd read %d arguments, the front was given %d (first difference %s)", len(inv.args), len(args), firstDiff(inv.args, args))
			}
			if !slices.Equal(inv.env, tc.env) {
				t.Errorf("bermd read %d environment entries, the front had %d (first difference %s)", len(inv.env), len(tc.env), firstDiff(inv.env, tc.env))
			}
			if r.status != 7 || !bytes.Equal(r.stderr, []byte("early \xff warning\nthe end\n")) {
				t.Errorf("the front ended %d with stderr %q; bermd said 7 and %q", r.status, tail(r.stderr), "early \xff warning\nthe end\n")
			}
			if got, err := os.ReadFile(summary); err != nil || string(got) != "{}\n" {
				t.Errorf("summary file: %q, %v", got, err)
			}
		})
	}
}

// maxArgStrlen is the kernel's bound on one argument or environment string (MAX_ARG_STRLEN,
// 32 pages): a single 1 MiB argument cannot reach any program, which the test shows first.
const maxArgStrlen = 32 * 4096

func TestAOneMebibyteArgumentNeverReachesTheFront(t *testing.T) {
	_, err := os.StartProcess("/bin/true", []string{"true", strings.Repeat("A", 1<<20)}, &os.ProcAttr{})
	if err == nil || !strings.Contains(err.Error(), syscall.E2BIG.Error()) {
		t.Fatalf("exec with a 1 MiB argument: %v, want E2BIG (the largest the front can get is %d bytes)", err, maxArgStrlen-1)
	}
}

// A bermd that answers badly (nothing, a frame of another version, lengths past what it
// sends, a length of 4 GiB) ends the front with a message and status 1, never a report.
func TestFrontSurvivesBrokenReplies(t *testing.T) {
	testutil.RequireRoot(t, "the front hands a call to bermd only as root (else it runs the Go front)")
	dir := sanitized(t)
	front := filepath.Join(dir, "berm")
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		reply []byte
		want  string
	}{
		{"no reply", nil, "without a reply: EOF"},
		{"an unknown frame", []byte{'?'}, "frame 0x3f"},
		{"a stderr frame cut short", append(le.AppendUint32([]byte{'e'}, 100), "abc"...), "unexpected EOF"},
		{"a stderr frame of 4 GiB", le.AppendUint32([]byte{'e'}, 0xffffffff), "without a reply"},
		{"an end frame cut in its status", []byte{'f', 1, 2}, "unexpected EOF"},
		{"an end frame with a 4 GiB summary", le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32([]byte{'f'}, 0), 0), 0), 0xfffffffe), "without a reply"},
		{"a summary path that cannot be written", endFrame(callproto.FrontEnd{Status: 0, SummaryPath: "/nonexistent/\xff/s", Summary: []byte("x")}), "write summary: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := startBermd(t, t.TempDir(), func(invocation) []byte { return tc.reply })
			_, wait := start(t, front, []string{"berm", "run", "--socket=" + b.sock, "--", "/bin/true"}, hostileEnv(4))
			r := wait()
			checkClean(t, "berm run", r)
			if r.status != 1 || !bytes.Contains(r.stderr, []byte(tc.want)) {
				t.Fatalf("status %d, stderr %q; want 1 and %q", r.status, tail(r.stderr), tc.want)
			}
		})
	}
}

// Where the front does not speak to bermd itself (another command, no bermd answering, a
// socket path too long for an address, an empty argv, bermd's fallback frame) it executes
// berm-front beside itself with its arguments as they were.
func TestFrontFallsBackWithItsArgumentsIntact(t *testing.T) {
	dir := sanitized(t)
	tmp := t.TempDir()
	for _, f := range []string{"berm"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// berm-front here counts what it was given: arguments on stdout, one per line.
	script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\nexit 42\n"
	if err := os.WriteFile(filepath.Join(tmp, "berm-front"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	front := filepath.Join(tmp, "berm")
	fallback := startBermd(t, tmp, func(invocation) []byte { return []byte{callproto.FrameFallback} })
	for _, tc := range []struct {
		name string
		argv []string
	}{
		{"another command", []string{"berm", "calls", "--", "\xff", ""}},
		{"run alone", []string{"berm", "run"}},
		{"no bermd at the socket", []string{"berm", "run", "--socket", filepath.Join(tmp, "none.sock"), "--", "x"}},
		{"a socket path longer than an address holds", []string{"berm", "run", "--socket=" + strings.Repeat("/s", 100), "x"}},
		{"bermd's fallback frame", []string{"berm", "run", "--socket=" + fallback.sock, "--", "/bin/true", ""}},
		{"100k arguments to another command", append([]string{"berm", "calls"}, slices.Repeat([]string{"", "a"}, 50_000)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, wait := start(t, front, tc.argv, hostileEnv(10_000))
			r := wait()
			checkClean(t, "berm", r)
			want := strings.Join(tc.argv[1:], "\n")
			if len(tc.argv) > 1 {
				want += "\n"
			}
			if r.status != 42 || string(r.stdout) != want {
				t.Fatalf("status %d, berm-front got %d bytes of arguments, want %d (stderr %q)", r.status, len(r.stdout), len(want), tail(r.stderr))
			}
		})
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %.40q vs %.40q", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}
