package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/promscrape"
)

// bermd is a bermd started for one test, with its own state, socket and metrics port.
type bermd struct {
	state, socket, metrics string
	cmd                    *exec.Cmd
	log                    *bytes.Buffer
	daemon                 *bermbin.Daemon
}

func startDaemon(t *testing.T, extra ...string) *bermd {
	t.Helper()
	b := bermbin.StartDaemon(t, append([]string{"--no-rules"}, extra...)...)
	return &bermd{state: b.State, socket: b.Socket, metrics: b.Metrics, cmd: b.Cmd, log: b.Log, daemon: b}
}

// metric reads one value from bermd's /metrics.
func (d *bermd) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, err := promscrape.Value(d.metrics, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// settled waits until bermd has a warm sandbox ready and starts none.
func (d *bermd) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d.metric(t, "berm_sandboxes_starting") != 0 || d.metric(t, "berm_sandboxes_warm") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("bermd did not settle with a warm sandbox")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (d *bermd) run(t *testing.T, stdin string, args ...string) bermbin.Result {
	t.Helper()
	return bermbin.BermIn(t, nil, strings.NewReader(stdin), append([]string{"run", "--socket", d.socket, "--daemon", "required"}, args...)...)
}

func (d *bermd) call(t *testing.T, id string) audit.Call {
	t.Helper()
	return d.daemon.Call(t, id)
}

// A call handed to bermd runs with the caller's stdio, in a sandbox started ahead of it, under
// the full policy; its record and timeline are in bermd's journal. A tenant without a warm
// sandbox gets one started for its call.
func TestDaemonRunsCallsWarmAndCold(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o644)
	os.Setenv("BERM_E2E_CALLER_ONLY", "leak")
	defer os.Unsetenv("BERM_E2E_CALLER_ONLY")

	script := `read line; echo "got $line"; echo to-stderr >&2; echo kept > out.txt
cat ` + secret + ` 2>/dev/null && echo SECRET-READ
echo x > /etc/berm-e2e 2>/dev/null && echo HOST-WRITE
echo tmp > /tmp/t && echo tmp-ok
env | grep -q BERM_E2E_CALLER_ONLY && echo ENV-LEAK
python3 -c 'import fcntl, socket, struct; f = struct.unpack("16sH", fcntl.ioctl(socket.socket(), 0x8913, struct.pack("16sH", b"lo", 0)))[1]; print("lo-up" if f & 1 else "lo-down")'
exit 3`
	for i, tenant := range []string{"default", "default", "other"} {
		if tenant == "default" {
			d.settled(t) // the default tenant is warmed at start and refilled after each call
		}
		id := fmt.Sprintf("daemon-%d", i)
		r := d.run(t, "hello\n", "--call-id", id, "--tenant", tenant, "--tool", "shell", "--workspace", ws, "--", "/bin/sh", "-c", script)
		if r.Exit != 3 {
			t.Fatalf("call %s: exit %d, want the tool's 3\nstdout: %s\nstderr: %s", id, r.Exit, r.Stdout, r.Stderr)
		}
		// lo-up: the call's own network namespace has its loopback up, warm (brought up while
		// the sandbox waited) or cold
		if !strings.Contains(r.Stdout, "got hello") || !strings.Contains(r.Stdout, "tmp-ok") || !strings.Contains(r.Stdout, "lo-up") || !strings.Contains(r.Stderr, "to-stderr") {
			t.Fatalf("call %s: stdio not the caller's\nstdout: %s\nstderr: %s", id, r.Stdout, r.Stderr)
		}
		for _, bad := range []string{"SECRET-READ", "HOST-WRITE", "ENV-LEAK"} {
			if strings.Contains(r.Stdout, bad) {
				t.Fatalf("call %s: %s\nstdout: %s", id, bad, r.Stdout)
			}
		}
		if data, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(data) != "kept\n" {
			t.Fatalf("call %s: the workspace write did not land: %q %v", id, data, err)
		}
		os.Remove(filepath.Join(ws, "out.txt"))
		c := d.call(t, id)
		if c.Record.EndReason != event.EndExit || c.Record.ExitCode != 3 || c.Start.Tenant != tenant {
			t.Fatalf("call %s: record %+v", id, c.Record)
		}
		tl := bermbin.Timeline(t, d.state, id)
		var sawShell bool
		for _, e := range tl.Events {
			if e.Kind == event.KindExec && strings.HasSuffix(e.Exec.Filename, "/sh") {
				sawShell = true
			}
		}
		if !sawShell {
			t.Fatalf("call %s: the tool's exec is not in its timeline", id)
		}
	}
	if _, err := os.Stat("/etc/berm-e2e"); err == nil {
		os.Remove("/etc/berm-e2e")
		t.Fatal("a call wrote to the host's /etc")
	}
	if w, c := d.metric(t, "berm_sandbox_launches_warm_total"), d.metric(t, "berm_sandbox_launches_cold_total"); w != 2 || c != 1 {
		t.Fatalf("launches: %v warm, %v cold; want 2 warm (tenant default) and 1 cold (tenant other)", w, c)
	}
}

// A warm sandbox's init is inside the root it prepared (it dropped the host's before its
// call): a call whose policy needs another root runs cold, and the sandboxes refilled after it
// prepare that root, warm again. A stricter call never sees a root prepared with more in it.
func TestDaemonWarmSandboxOnlyForItsRoot(t *testing.T) {
	if st, err := os.Stat("/srv"); err != nil || !st.IsDir() {
		t.Fatalf("the test grants /srv, which Debian's base system has: %v", err)
	}
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	pol := filepath.Join(t.TempDir(), "srv.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: with-srv}
spec:
  filesystem:
    read: [/usr, /bin, /sbin, /lib, /lib64, /etc, /srv]
    write: ["${WORKSPACE}", "${TMP}", /dev/null]
    exec: [/usr, /bin, /sbin, /lib, /lib64]
`), 0o644)
	for _, c := range []struct {
		id         string
		srv        bool // the call's policy grants /srv: another root than strict's
		warm, cold float64
	}{
		{"root-strict", false, 1, 0}, // the sandbox bermd started with prepared no root
		{"root-strict-2", false, 2, 0},
		{"root-srv", true, 2, 1}, // the warm sandbox is inside strict's root
		{"root-srv-2", true, 3, 1},
		// the other way: a root with more in it (/srv) is never handed to a stricter call
		{"root-strict-3", false, 3, 2},
	} {
		d.settled(t)
		args := []string{"--call-id", c.id, "--workspace", ws}
		if c.srv {
			args = append(args, "--policy", pol)
		}
		r := d.run(t, "", append(args, "--", "/bin/sh", "-c", "test -d /srv && echo srv; echo done")...)
		if want := map[bool]string{true: "srv\ndone\n", false: "done\n"}[c.srv]; r.Exit != 0 || r.Stdout != want {
			t.Fatalf("%s: exit %d, stdout %q (want %q)\nstderr: %s", c.id, r.Exit, r.Stdout, want, r.Stderr)
		}
		if w, cold := d.metric(t, "berm_sandbox_launches_warm_total"), d.metric(t, "berm_sandbox_launches_cold_total"); w != c.warm || cold != c.cold {
			t.Fatalf("after %s: %v warm and %v cold launches, want %v and %v", c.id, w, cold, c.warm, c.cold)
		}
	}
}

// A caller's SIGINT ends its call as interrupted; a caller killed outright ends it as
// client_lost, and nothing of the call survives either.
func TestDaemonCallEndsWithItsCaller(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	for _, tc := range []struct {
		id     string
		sig    syscall.Signal
		reason event.EndReason
	}{
		{"interrupted", syscall.SIGINT, event.EndInterrupted},
		{"lost", syscall.SIGKILL, event.EndClientLost},
	} {
		d.settled(t)
		marker := "berm-e2e-" + tc.id
		cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--call-id", tc.id,
			"--workspace", ws, "--", "/bin/sh", "-c", "echo started > started; setsid sh -c 'sleep 300; : "+marker+"' & exec sh -c 'sleep 301; : "+marker+"'")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		bermbin.WaitFile(t, cmd, filepath.Join(ws, "started"))
		cmd.Process.Signal(tc.sig)
		cmd.Wait()
		// The record is written when the call has ended; wait for it.
		var c audit.Call
		for deadline := time.Now().Add(10 * time.Second); ; {
			found := false
			for _, cc := range bermbin.Calls(t, d.state) {
				if cc.Start.CallID == tc.id && cc.Record != nil {
					c, found = cc, true
				}
			}
			if found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no record", tc.id)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if c.Record.EndReason != tc.reason {
			t.Fatalf("%s: end reason %s (%s), want %s", tc.id, c.Record.EndReason, c.Record.EndDetail, tc.reason)
		}
		if out, _ := exec.Command("pgrep", "-f", marker).Output(); len(out) > 0 {
			t.Fatalf("%s: processes of the call survived: %s", tc.id, out)
		}
	}
}

// Bad requests fail with a clear error and run nothing: a taken call id, a broken policy.
func TestDaemonRefusesBadCalls(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--call-id", "dup",
		"--workspace", ws, "--", "/bin/sh", "-c", "echo started > started; exec sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := d.run(t, "", "--call-id", "dup", "--workspace", ws, "--", "/bin/true")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "call id dup of tenant default is taken") {
		t.Fatalf("a second call with a running call's id: exit %d, stderr %q", r.Exit, r.Stderr)
	}

	pol := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bad}\nspec:\n  filesystem:\n    raed: [/usr]\n"), 0o644)
	r = d.run(t, "", "--policy", pol, "--workspace", ws, "--", "/bin/true")
	if r.Exit == 0 || !strings.Contains(r.Stderr, pol+":6") || !strings.Contains(r.Stderr, "raed") {
		t.Fatalf("a broken policy: exit %d, stderr %q; want its file:line and the field", r.Exit, r.Stderr)
	}
}

// A warm sandbox is created with default caps; the call that claims it gets its own, raised
// or lowered, before its tool starts.
func TestDaemonWarmCallTakesItsCaps(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	for _, mem := range []int64{1 << 30, 64 << 20} {
		d.settled(t)
		id := fmt.Sprintf("caps-%d", mem)
		cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.socket, "--daemon", "required", "--call-id", id,
			"--memory", strconv.FormatInt(mem, 10), "--workspace", ws, "--", "/bin/sh", "-c", "echo started > started; exec sleep 30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		bermbin.WaitFile(t, cmd, filepath.Join(ws, "started"))
		var found []string
		for _, pattern := range []string{"/sys/fs/cgroup/memory/berm/default/warm-*/memory.limit_in_bytes", "/sys/fs/cgroup/berm/default/warm-*/memory.max", "/sys/fs/cgroup/unified/berm/default/warm-*/memory.max"} {
			files, _ := filepath.Glob(pattern)
			for _, f := range files {
				if data, err := os.ReadFile(f); err == nil {
					found = append(found, strings.TrimSpace(string(data)))
				}
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		want := strconv.FormatInt(mem, 10)
		if !strings.Contains(" "+strings.Join(found, " ")+" ", " "+want+" ") {
			t.Fatalf("%s: no warm cgroup has the call's memory cap %s: %v", id, want, found)
		}
	}
	if w := d.metric(t, "berm_sandbox_launches_warm_total"); w != 2 {
		t.Fatalf("%v warm launches, want both calls warm", w)
	}
}

// A call whose sandbox cannot be set up after its init started (here: an init without its
// stage beside it) ends as setup_failed, and bermd goes on serving: it once crashed reading
// the pid of the init the failed set-up had already ended.
func TestDaemonSurvivesACallItCannotSetUp(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	lone := filepath.Join(dir, "berm-init")
	data, err := os.ReadFile(bermbin.Path(t, "berm-init"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	d := startDaemon(t, "--init", lone)
	for i := range 2 {
		r := d.run(t, "", "--", "/bin/true")
		// The init fails at its start (no stage beside it): the call ends as setup_failed when
		// the init got as far as the call, or fails to start its sandbox when the init was gone
		// before bermd held its namespaces (which one is a race), or its workspace's idmap
		// fails first (the stage, absent, makes that user namespace: berm-stage --userns).
		// Either way it runs nothing.
		setup := r.Exit == 125 && strings.Contains(r.Stderr, "setup_failed")
		start := r.Exit == 1 && (strings.Contains(r.Stderr, "sandbox") || strings.Contains(r.Stderr, "berm-stage --userns"))
		if !setup && !start {
			t.Fatalf("call %d: exit %d, stderr %q; want it refused at set-up (125, setup_failed) or at the sandbox's start (1)", i, r.Exit, r.Stderr)
		}
	}
	if d.cmd.ProcessState != nil || d.cmd.Process.Signal(syscall.Signal(0)) != nil {
		t.Fatalf("bermd is gone:\n%s", d.log)
	}
}
