package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/testenv/bermbin"
)

// fronts are berm's two fronts: the C one (bin/berm, the bare invocation bermd parses) and
// the Go one it falls back to (bin/berm-front, which parses and resolves itself).
var fronts = []struct{ name, bin string }{{"c", "berm"}, {"go", "berm-front"}}

// frontPath is a front's binary. The C front is a copy alone in its directory, without the
// Go front beside it: a call it did not serve itself fails (it cannot fall back), so a call
// that succeeds went through its bare invocation. fallback: the C front beside the Go one.
func frontPath(t *testing.T, name string, fallback bool) string {
	t.Helper()
	if name != "berm" || fallback {
		return bermbin.Path(t, name)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(bermbin.Path(t, "berm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "berm"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "berm")
}

// runFront runs one front in dir with stdin, the extra environment and the call id given;
// the id in its output reads ID.
func runFront(t *testing.T, bin, dir, stdin, id string, env []string, args ...string) bermbin.Result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, append(os.Environ(), env...), strings.NewReader(stdin)
	r := bermbin.Run(t, cmd)
	return bermbin.Result{Stdout: strings.ReplaceAll(r.Stdout, id, "ID"), Stderr: strings.ReplaceAll(r.Stderr, id, "ID"), Exit: r.Exit}
}

// The C front and the Go front give the same exit status, stdout and stderr bytes for the
// same calls: a tool's own status and stdio, usage errors, a call bermd refuses, a tool
// killed by a cap, a summary that cannot be written, no bermd, a huge argv and environment.
func TestFrontsAgree(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "bad.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bad}\nspec:\n  filesystem:\n    raed: [/usr]\n"), 0o644)
	huge := make([]string, 20000)
	for i := range huge {
		huge[i] = fmt.Sprintf("argument-%05d", i)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		stdin    string
		fallback bool // the C front hands this call to the Go front
	}{
		{name: "the tool's status and stdio", stdin: "hello\n",
			args: []string{"--workspace", ws, "--", "/bin/sh", "-c", "read l; echo out $l; echo err >&2; exit 3"}},
		{name: "an unknown flag", args: []string{"--bogus", "--", "/bin/true"}},
		{name: "a bad size", args: []string{"--memory", "lots", "--", "/bin/true"}},
		{name: "no command", args: []string{}},
		{name: "an unset --env", args: []string{"--env", "BERM_FRONT_TEST_UNSET", "--", "/bin/true"}},
		{name: "a --env from the caller", env: []string{"BERM_FRONT_TEST=caller's"},
			args: []string{"--workspace", ws, "--env", "BERM_FRONT_TEST", "--", "/bin/sh", "-c", "echo $BERM_FRONT_TEST"}},
		{name: "a broken policy", args: []string{"--policy", pol, "--workspace", ws, "--", "/bin/true"}},
		{name: "killed by its wall-time cap", args: []string{"--timeout", "1s", "--workspace", ws, "--", "/bin/sleep", "30"}},
		{name: "rules are the embedded agent's", args: []string{"--no-rules", "--workspace", ws, "--", "/bin/true"}},
		{name: "a summary that cannot be written", args: []string{"--summary", "/nonexistent-berm-dir/s.json", "--workspace", ws, "--", "/bin/true"}},
		{name: "no bermd", args: []string{"--socket", filepath.Join(dir, "none.sock"), "--", "/bin/true"}, fallback: true},
		{name: "a huge argv and environment", env: []string{"BERM_FRONT_BIG=" + strings.Repeat("b", 100<<10)},
			args: append([]string{"--workspace", ws, "--env", "BERM_FRONT_BIG", "--", "/bin/sh", "-c", `echo $# ${#BERM_FRONT_BIG} "$1" "$20000"`, "sh"}, huge...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []bermbin.Result
			for i, f := range fronts {
				d.settled(t)
				id := fmt.Sprintf("agree-%d-%s", time.Now().UnixNano(), f.name)
				args := append([]string{"run", "--socket", d.socket, "--daemon", "required", "--call-id", id}, tc.args...)
				got = append(got, runFront(t, frontPath(t, f.bin, tc.fallback), dir, tc.stdin, id, tc.env, args...))
				t.Logf("%s: exit %d\nstdout: %.300q\nstderr: %.300q", fronts[i].name, got[i].Exit, got[i].Stdout, got[i].Stderr)
			}
			if got[0] != got[1] {
				t.Fatalf("the fronts differ:\nC:  exit %d stdout %q\n    stderr %q\nGo: exit %d stdout %q\n    stderr %q",
					got[0].Exit, got[0].Stdout, got[0].Stderr, got[1].Exit, got[1].Stdout, got[1].Stderr)
			}
		})
	}
}

// --summary: the front writes it itself, relative to its own directory, with the record's
// fields as the Go front writes them.
func TestFrontsWriteTheSameSummary(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	dir := t.TempDir()
	var keys [][]string
	for _, f := range fronts {
		d.settled(t)
		id := "summary-" + f.name
		r := runFront(t, frontPath(t, f.bin, false), dir, "", id, nil, "run", "--socket", d.socket, "--call-id", id, "--workspace", ws, "--summary", f.name+".json", "--", "/bin/sh", "-c", "exit 4")
		if r.Exit != 4 {
			t.Fatalf("%s: exit %d: %s", f.name, r.Exit, r.Stderr)
		}
		data, err := os.ReadFile(filepath.Join(dir, f.name+".json"))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil || !strings.HasPrefix(string(data), "{\n  \"call_id\": \""+id+"\"") || !strings.HasSuffix(string(data), "\n}\n") {
			t.Fatalf("%s: summary %.200q: %v", f.name, data, err)
		}
		if m["exit_status"] != float64(4) || m["end_reason"] != "exit" {
			t.Fatalf("%s: summary says exit_status %v end_reason %v", f.name, m["exit_status"], m["end_reason"])
		}
		keys = append(keys, slices.Sorted(maps.Keys(m)))
	}
	if !slices.Equal(keys[0], keys[1]) {
		t.Fatalf("the summaries' fields differ: %v and %v", keys[0], keys[1])
	}
}

// SIGINT and SIGTERM reach bermd from either front as the protocol's interrupt: the same
// end, status and message.
func TestFrontsPassInterrupts(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		var got []bermbin.Result
		for _, f := range fronts {
			d.settled(t)
			id := fmt.Sprintf("signal-%d-%s", sig, f.name)
			cmd := exec.Command(frontPath(t, f.bin, false), "run", "--socket", d.socket, "--call-id", id, "--workspace", ws, "--",
				"/bin/sh", "-c", "echo started > started; exec sleep 30")
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			bermbin.WaitFile(t, cmd, filepath.Join(ws, "started"))
			cmd.Process.Signal(sig)
			cmd.Wait()
			got = append(got, bermbin.Result{Stdout: out.String(), Stderr: strings.ReplaceAll(errb.String(), id, "ID"), Exit: cmd.ProcessState.ExitCode()})
		}
		if got[0] != got[1] || !strings.Contains(got[0].Stderr, "ended: interrupted (berm run received") {
			t.Fatalf("%v: C: %+v\nGo: %+v", sig, got[0], got[1])
		}
	}
}

// A caller that is not root gets from the C front what it got from the Go front (berm run
// needs root), and from bermd nothing, even where the socket's mode would let it connect.
func TestFrontRefusesWhoIsNotRoot(t *testing.T) {
	d := startDaemon(t)
	bin := t.TempDir()
	os.Chmod(bin, 0o755)
	os.Chmod(filepath.Dir(bin), 0o755)
	for _, name := range []string{"berm", "berm-front", "berm-full"} {
		data, err := os.ReadFile(bermbin.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(bin, name), data, 0o755)
	}
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var outs []string
	for _, name := range []string{"berm", "berm-front"} {
		cmd := exec.Command(filepath.Join(bin, name), "run", "--socket", d.socket, "--call-id", "nobody-"+name, "--", "/bin/true")
		cmd.SysProcAttr, cmd.Dir = nobody, "/"
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("%s as nobody: %v: %s", name, err, out)
		}
		outs = append(outs, string(out))
	}
	if want := "berm: bermd at " + d.socket + " does not serve uid 65534 (it serves root and the users and groups its --access file names): try sudo\n"; outs[0] != outs[1] || outs[0] != want {
		t.Fatalf("as nobody: C %q, Go %q", outs[0], outs[1])
	}
	// No bermd answering: the embedded agent, which needs root.
	for _, name := range []string{"berm", "berm-front"} {
		none := filepath.Join(bin, "none.sock")
		cmd := exec.Command(filepath.Join(bin, name), "run", "--socket", none, "--", "/bin/true")
		cmd.SysProcAttr, cmd.Dir = nobody, "/"
		out, _ := cmd.CombinedOutput()
		if want := "berm: run needs root (cgroups, namespaces, eBPF) when no bermd answers at " + none + ": try sudo, or run bermd with an --access file that names you\n"; string(out) != want {
			t.Fatalf("%s as nobody without bermd: %q, want %q", name, out, want)
		}
	}
	// The socket opened to all: bermd still serves no one but root, bare invocation or not.
	os.Chmod(d.socket, 0o666)
	defer os.Chmod(d.socket, 0o600)
	py := `import socket, struct, os, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])
body = struct.pack("<I", 3) + b"--call-id\0nobody-raw\0/bin/true\0" + struct.pack("<I", 0)
try:  # bermd refuses on connect, and may have closed before the request is sent
    socket.send_fds(s, [b"A"], [0, 1, 2, os.open("/", os.O_RDONLY)])
    s.sendall(struct.pack("<I", len(body)) + body)
except (BrokenPipeError, ConnectionResetError):
    pass
sys.stdout.write(s.makefile().readline())`
	cmd := exec.Command("/usr/bin/python3", "-c", py, d.socket) // Debian's, which nobody can run
	cmd.SysProcAttr = nobody
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"error":"bermd serves root only (`) {
		t.Fatalf("a bare invocation as nobody: %v: %q\n%s", err, out, errb.String())
	}
	for _, c := range bermbin.Calls(t, d.state) {
		if strings.HasPrefix(c.Start.CallID, "nobody") {
			t.Fatalf("a call of nobody's ran: %+v", c.Start)
		}
	}
}

// A malformed bare invocation ends with an error and runs nothing; bermd serves the next.
func TestBareInvocationMalformed(t *testing.T) {
	d := startDaemon(t)
	for _, tc := range []struct {
		name string
		fds  int
		body []byte
		want string
	}{
		{"too large", 4, binary.LittleEndian.AppendUint32(nil, callproto.MaxInvocation+1), "berm: bermd: invocation of"},
		{"a string past its end", 4, append(binary.LittleEndian.AppendUint32(nil, 8), 1, 0, 0, 0, 'a', 'b', 'c', 'd'), "berm: bermd: invocation arguments"},
		{"no working directory", 3, nil, `"error":"expected a run request`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", d.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fds := []int{0, 1, 2, 0}[:tc.fds]
			f, _ := c.(*net.UnixConn).File()
			defer f.Close()
			if err := unix.Sendmsg(int(f.Fd()), []byte{callproto.InvokeMagic}, unix.UnixRights(fds...), nil, 0); err != nil {
				t.Fatal(err)
			}
			c.Write(tc.body)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			reply, _ := io.ReadAll(c) // bermd closes the connection after its answer
			if !strings.Contains(string(reply), tc.want) {
				t.Fatalf("reply %q, want %q in it", reply, tc.want)
			}
		})
	}
	d.settled(t)
	ws := bermbin.Workspace(t)
	if r := d.run(t, "", "--workspace", ws, "--", "/bin/true"); r.Exit != 0 {
		t.Fatalf("the next call: exit %d: %s", r.Exit, r.Stderr)
	}
}
