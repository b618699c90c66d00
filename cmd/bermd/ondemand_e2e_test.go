package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/testenv/bermbin"
)

// onDemandBin is a bin directory with berm (and its Go front), bermd, berm-init and berm-stage but no berm-full: a call
// that did not go to bermd fails there (the embedded agent is berm-full's), so a call that
// succeeds went through bermd.
func onDemandBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"berm", "berm-front", "bermd", "berm-init", "berm-stage"} {
		src, err := os.Open(bermbin.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE, 0o755)
		if err == nil {
			_, err = io.Copy(dst, src)
			dst.Close()
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// daemonPID is the pid of the process listening on the socket (its peer credentials).
func daemonPID(t *testing.T, socket string) int {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("no bermd on %s: %v", socket, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		t.Fatal(err)
	}
	return int(cred.Pid)
}

// alive says whether pid runs (a zombie waiting for its reaper has ended).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(after, "Z") && !strings.HasPrefix(after, "X")
}

// stopDaemons ends, at the test's end, every bermd it saw that is still there: a test's
// bermd never outlives it, idle exit or not. A failed test shows the bermd's log.
func stopDaemons(t *testing.T, socket string, pids *[]int) {
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(filepath.Dir(socket), "bermd.log"))
			t.Logf("log of the bermd started on demand:\n%s", log)
		}
		// One the test did not get to record (it failed first) answers on the socket.
		if callproto.Available(socket) {
			*pids = append(*pids, daemonPID(t, socket))
		}
		for _, pid := range *pids {
			if alive(pid) {
				syscall.Kill(pid, syscall.SIGTERM)
				for i := 0; i < 1000 && alive(pid); i++ {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
	})
}

func onDemandRun(t *testing.T, bin, socket, ws string, args ...string) (stdout, stderr string, exit int) {
	t.Helper()
	r := bermbin.Run(t, execBerm(bin, socket, ws, args...))
	return r.Stdout, r.Stderr, r.Exit
}

const startLine = "berm: starting bermd (exits after 5s idle)"

// Without a running bermd, the first `berm run` starts one (and says so), the next call
// reaches the same bermd, which exits once idle; the call after that starts a new one.
func TestRunStartsBermdOnDemand(t *testing.T) {
	bermbin.RequireRoot(t)
	bin, socket, ws := onDemandBin(t), filepath.Join(t.TempDir(), "bermd.sock"), bermbin.Workspace(t)
	var pids []int
	stopDaemons(t, socket, &pids)

	// The first caller holds a lock on a descriptor without close-on-exec, as `flock FILE
	// berm run ...` does: bermd, which outlives the call, must not keep it.
	lockPath := filepath.Join(t.TempDir(), "caller.lock")
	held, err := os.Create(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := execBerm(bin, socket, ws, "/bin/echo", "first")
	cmd.ExtraFiles = []*os.File{held}
	var outb, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &outb, &errb
	_ = cmd.Run()
	held.Close()
	out, errs, code := outb.String(), errb.String(), cmd.ProcessState.ExitCode()
	if code != 0 || out != "first\n" || !strings.Contains(errs, startLine) {
		t.Fatalf("first call: exit %d, stdout %q, stderr %q; want its output and %q", code, out, errs, startLine)
	}
	first := daemonPID(t, socket)
	pids = append(pids, first)
	again, err := os.Open(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := unix.Flock(int(again.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("the caller's lock is still held after its call (bermd %d inherited it?): %v", first, err)
	}

	out, errs, code = onDemandRun(t, bin, socket, ws, "/bin/echo", "second")
	if code != 0 || out != "second\n" || strings.Contains(errs, "starting bermd") {
		t.Fatalf("second call: exit %d, stdout %q, stderr %q; want its output from the running bermd", code, out, errs)
	}
	if pid := daemonPID(t, socket); pid != first {
		t.Fatalf("second call: bermd pid %d, want the first call's %d", pid, first)
	}

	for deadline := time.Now().Add(60 * time.Second); alive(first); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bermd %d still runs a minute after its calls, with --idle-exit 5s", first)
		}
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Fatalf("bermd exited when idle and left its socket: %v", err)
	}

	out, errs, code = onDemandRun(t, bin, socket, ws, "/bin/echo", "third")
	if code != 0 || out != "third\n" || !strings.Contains(errs, startLine) {
		t.Fatalf("call after the idle exit: exit %d, stdout %q, stderr %q; want a new bermd", code, out, errs)
	}
	if pid := daemonPID(t, socket); pid == first {
		t.Fatalf("call after the idle exit reached pid %d, the bermd that exited", pid)
	} else {
		pids = append(pids, pid)
	}
}

// Concurrent first calls start one bermd between them, and every call runs.
func TestConcurrentFirstCallsStartOneBermd(t *testing.T) {
	bermbin.RequireRoot(t)
	bin, socket, ws := onDemandBin(t), filepath.Join(t.TempDir(), "bermd.sock"), bermbin.Workspace(t)
	var pids []int
	stopDaemons(t, socket, &pids)

	const n = 4
	type result struct {
		out, errs string
		code      int
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := execBerm(bin, socket, ws, "/bin/echo", fmt.Sprint("call-", i))
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			results[i] = result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
			if err != nil && cmd.ProcessState == nil {
				results[i].errs += err.Error()
			}
		}()
	}
	wg.Wait()
	if _, err := os.Stat(socket); err == nil {
		pids = append(pids, daemonPID(t, socket))
	}
	starts := 0
	for i, r := range results {
		if r.code != 0 || r.out != fmt.Sprintf("call-%d\n", i) {
			t.Errorf("call %d: exit %d, stdout %q, stderr %q", i, r.code, r.out, r.errs)
			logTimeline(t, r.errs)
		}
		starts += strings.Count(r.errs, "starting bermd")
	}
	if starts != 1 {
		t.Fatalf("%d concurrent first calls started %d bermds, want 1", n, starts)
	}
}

// execBerm is `berm run` from bin on socket, with no bermd assumed: on-demand start allowed,
// a short idle time.
func execBerm(bin, socket, ws string, argv ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, "berm"), append([]string{"run", "--socket", socket, "--workspace", ws, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), "BERM_DAEMON=auto", "BERM_IDLE_EXIT=5s")
	return cmd
}

// The socket's directory may be writable by others: a symlink planted as bermd's log is not
// followed (root would truncate what it points to), and no bermd starts with it.
func TestOnDemandLogIsNotFollowed(t *testing.T) {
	bermbin.RequireRoot(t)
	bin, dir, ws := onDemandBin(t), t.TempDir(), bermbin.Workspace(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "bermd.log")); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "bermd.sock")
	var pids []int
	stopDaemons(t, socket, &pids)
	_, errs, _ := onDemandRun(t, bin, socket, ws, "/bin/true")
	if _, err := os.Stat(socket); err == nil {
		pids = append(pids, daemonPID(t, socket))
		t.Errorf("a bermd started with its log planted as a symlink")
	}
	if data, _ := os.ReadFile(victim); string(data) != "precious\n" {
		t.Fatalf("the file the planted log pointed to was written: %q (stderr %q)", data, errs)
	}
	if !strings.Contains(errs, "bermd did not start") {
		t.Fatalf("stderr %q: want why bermd did not start", errs)
	}
}

// logTimeline shows the timeline of the call a failed `berm run` names (in the journal of a
// bermd started on demand, the default state directory).
func logTimeline(t *testing.T, stderr string) {
	_, rest, ok := strings.Cut(stderr, "berm: call ")
	if !ok {
		return
	}
	id, _, _ := strings.Cut(rest, " ")
	r := bermbin.Berm(t, nil, "timeline", "--state-dir", "/var/lib/berm", id)
	t.Logf("timeline of %s:\n%s%s", id, r.Stdout, r.Stderr)
}
