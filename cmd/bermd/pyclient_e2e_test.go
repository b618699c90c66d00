package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// pyClient is the Python client of the run protocol (sandboxer/callproto/python).
func pyClient() string {
	return filepath.Join(bermbin.RepoRoot(), "sandboxer", "callproto", "python")
}

// python runs a script with the client importable, as root.
func python(t *testing.T, script string, args ...string) bermbin.Result {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", script}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pyClient(), "PYTHONDONTWRITEBYTECODE=1")
	r := bermbin.Run(t, cmd)
	t.Logf("python: exit %d\nstdout: %.2000s\nstderr: %.2000s", r.Exit, r.Stdout, r.Stderr)
	return r
}

// The Python client, written from PROTOCOL.md alone, against a real bermd: a call's output,
// status and record; output far past a pipe's size and stdin as large without deadlock;
// bermd's refusals (another major version, a policy that does not exist); the command form
// with the caller's own stdio.
func TestPythonClientRunsCallsThroughBermd(t *testing.T) {
	d := startDaemon(t)
	d.settled(t)
	script := `
import sys, berm_client as b
sock = sys.argv[1]
def check(cond, what):
    if not cond:
        print("FAIL:", what); sys.exit(1)

r = b.run(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], socket_path=sock, call_id="py-1")
check(r.exit_status == 3, "exit status %r" % r.exit_status)
check(r.stdout == b"out\n" and r.stderr == b"err\n", "output %r %r" % (r.stdout, r.stderr))
check(r.record["call_id"] == "py-1" and r.record["tenant"] == "default" and r.record["end_reason"] == "exit", "record %r" % r)
check(r.version.split(".")[0] == b.PROTOCOL_VERSION.split(".")[0], "reply version %r (a major other than the client's)" % r.version)

big = 4 << 20
r = b.run(["/bin/sh", "-c", "head -c %d /dev/zero | tr '\\0' a; head -c %d /dev/zero | tr '\\0' b >&2" % (big, big)], socket_path=sock)
check(r.exit_status == 0 and len(r.stdout) == big and len(r.stderr) == big and set(r.stdout) == {ord("a")}, "big output: %d %d %r" % (len(r.stdout), len(r.stderr), r))

data = bytes(range(256)) * 4096
r = b.run(["/bin/cat"], stdin=data, socket_path=sock)
check(r.stdout == data, "stdin through cat: %d bytes back of %d" % (len(r.stdout), len(data)))

r = b.run(["/bin/true"], stdin=b"x" * (1 << 20), socket_path=sock)
check(r.exit_status == 0, "a tool that does not read its stdin: %r" % r)

for kw, want in ((dict(version="2.0"), "protocol version 2.0 not supported"),
                 (dict(policy_file="/nonexistent/p.yaml"), "/nonexistent/p.yaml")):
    try:
        b.run(["/bin/true"], socket_path=sock, **kw)
        check(False, "%r ran" % kw)
    except b.BermError as e:
        check(want in str(e), "refusal %r lacks %r" % (str(e), want))
print("OK")
`
	r := python(t, script, d.socket)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "OK") {
		t.Fatalf("the Python client failed: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	c := d.call(t, "py-1")
	if c.Record.ExitCode != 3 || c.Start.Tool != "adhoc" {
		t.Fatalf("py-1 in the trail: %+v", c.Record)
	}

	cmd := exec.Command("python3", filepath.Join(pyClient(), "berm_client.py"), "--socket", d.socket, "--call-id", "py-cli", "--", "/bin/sh", "-c", "cat; echo cli; exit 5")
	cmd.Stdin = strings.NewReader("from stdin\n")
	cr := bermbin.Run(t, cmd)
	if cr.Exit != 5 || cr.Stdout != "from stdin\ncli\n" {
		t.Fatalf("the client as a command: exit %d stdout %q stderr %q", cr.Exit, cr.Stdout, cr.Stderr)
	}
	d.call(t, "py-cli")
}

// The Python client as a tenant's caller that is not root: it runs in its tenant, is refused
// another's with the right named, and reads only the calls of tenants it may read.
func TestPythonClientAsATenantsCaller(t *testing.T) {
	s := setupAccess(t)
	py := systemPython(t)
	dst := filepath.Join(s.dir, "berm_client.py")
	data, err := os.ReadFile(filepath.Join(pyClient(), "berm_client.py"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dst, data, 0o644)
	script := `
import sys, berm_client as b
sock = sys.argv[1]
r = b.run(["/bin/sh", "-c", "echo $BERM_TENANT $HOME"], socket_path=sock, call_id="py-acme")
assert r.exit_status == 0 and r.stdout.startswith(b"acme /run/berm/workspaces/py-acme-"), r.stdout
try:
    b.run(["/bin/true"], socket_path=sock, tenant="beta")
    sys.exit("ran in beta")
except b.BermError as e:
    assert 'no "run" right in tenant "beta"' in str(e), e
try:
    b.calls(socket_path=sock)
    sys.exit("read calls without read")
except b.BermError as e:
    assert "no tenant grants it read" in str(e), e
print("OK")
`
	env := []string{"PYTHONPATH=" + s.dir, "PYTHONDONTWRITEBYTECODE=1"}
	r := s.acme.as(t, s.dir, env, py, "-c", script, s.d.socket)
	t.Logf("acme: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "OK") {
		t.Fatalf("acme's Python client: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	read := `
import sys, berm_client as b
ids = [c["start"]["call_id"] for c in b.calls(socket_path=sys.argv[1])]
assert ids == ["py-acme"], ids
call, events = b.timeline("py-acme", socket_path=sys.argv[1])
assert call["record"]["tenant"] == "acme" and len(events) > 0, call
print("OK")
`
	r = s.sec.as(t, s.dir, env, py, "-c", read, s.d.socket)
	if r.Exit != 0 || !strings.Contains(r.Stdout, "OK") {
		t.Fatalf("acme's reader's Python client: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
}
