package runcli

import (
	"bufio"
	"bytes"
	"os"
	"testing"

	"github.com/bermsec/berm/sandboxer/callproto"
)

// FuzzInvoke: berm run's flags as bermd parses them for the C front (a bare invocation read
// by callproto.ReadInvocation, then Invoke), with any arguments and environment a caller
// sends. For a socket that is not this bermd's nothing is launched and nothing is made: the
// call falls back to the Go front, or ends with a usage error said on stderr; never a panic.
func FuzzInvoke(f *testing.F) {
	for _, s := range []struct{ args, env []string }{
		{[]string{"--", "/bin/true"}, nil},
		{[]string{"--call-id", "c", "--workspace", "ws", "--policy", "p.yaml", "--env", "X", "--", "/bin/true"}, []string{"PWD=/", "X=1"}},
		{[]string{"--memory", "lots", "--", "x"}, nil},
		{[]string{"--memory", "99999999999999999999Gi", "--cpus", "NaN", "--timeout", "-1h", "--pids", "-1", "--", "x"}, nil},
		{[]string{"--tmp-size", "1e400", "--output-limit", "0x10", "--", "x"}, nil},
		{[]string{"--env", "", "--env", "=", "--env", "A=\xff", "--trace-syscall", "nope", "--", "x"}, []string{"NOEQUALS", ""}},
		{[]string{"--daemon", "sometimes", "--", "x"}, []string{"BERM_DAEMON=never"}},
		{[]string{"--state-dir", "\x00", "--", "x"}, nil},
		{[]string{"-h"}, nil},
		{[]string{"--socket"}, nil},
		{[]string{"--socket", "rel/../s", "--", "x"}, []string{"PWD=/nonexistent"}},
		{[]string{"---tool=x", "--", "x"}, nil},
	} {
		f.Add(callproto.AppendInvocation(nil, s.args, s.env))
	}
	cwd, err := os.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer cwd.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		args, env, err := callproto.ReadInvocation(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		fc := Invoke(&callproto.Invocation{Args: args, Env: env, Cwd: cwd}, func(string) bool { return false })
		if fc.Request != nil || fc.Cleanup != nil {
			t.Fatalf("a call for another socket was resolved: %+v", fc.Request)
		}
		switch {
		case fc.Fallback:
			if fc.End.Status != 0 || len(fc.End.Stderr) != 0 || len(fc.Early) != 0 {
				t.Fatalf("a fallback that also ends: %+v", fc.End)
			}
		case fc.End.Status == 2:
			if len(fc.End.Stderr) == 0 && !helpAsked(args) {
				t.Fatalf("a usage error without a word on stderr, for %q", args)
			}
		case fc.End.Status == 0 && helpAsked(args):
			// -h is answered with the usage, and succeeds.
			if !bytes.Contains(fc.End.Stderr, []byte("usage: berm run")) {
				t.Fatalf("-h answered without the usage: %q", fc.End.Stderr)
			}
		default:
			t.Fatalf("for another socket: status %d, stderr %q", fc.End.Status, fc.End.Stderr)
		}
	})
}

// helpAsked: -h or --help before the command, which flag answers with its usage only.
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}
