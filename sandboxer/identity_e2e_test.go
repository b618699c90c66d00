package sandboxer_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// background runs `berm run` without waiting; wait returns its result.
func background(t *testing.T, state string, args ...string) (wait func() bermbin.Result) {
	t.Helper()
	done := bermbin.Start(t, exec.Command(bermbin.Path(t, "berm"), append([]string{"run", "--state-dir", state, "--no-rules"}, args...)...))
	return func() bermbin.Result { return <-done }
}

// waitFile waits for a file a call makes in its workspace (a harness guard, not an assertion
// on speed: the calls' own wall-time caps end them first).
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// hostUID is the host uid a call's uid_map line ("inside outside count") maps its tool to.
func hostUID(t *testing.T, uidMap string) uint64 {
	t.Helper()
	f := strings.Fields(uidMap)
	if len(f) != 3 || f[2] != "1" {
		t.Fatalf("the tool's uid map is not one uid of its own: %q", uidMap)
	}
	h, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Two calls running at the same time run as different host uids and gids, none of them
// root's or nobody's; neither is the uid of the other.
func TestConcurrentCallsHaveTheirOwnHostIDs(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := bermbin.Workspace(t)
	// Each call waits for the other's file: both run at once, whatever the scheduling.
	script := func(me, other string) string {
		return fmt.Sprintf(`cat /proc/self/uid_map > %[1]s.uid; cat /proc/self/gid_map > %[1]s.gid; touch %[1]s; while [ ! -e %[2]s ]; do sleep 0.02; done`, me, other)
	}
	waitA := background(t, t.TempDir(), "--call-id", "ids-a", "--timeout", "60s", "--workspace", ws, "--", "sh", "-c", script("a", "b"))
	waitB := background(t, t.TempDir(), "--call-id", "ids-b", "--timeout", "60s", "--workspace", ws, "--", "sh", "-c", script("b", "a"))
	for _, r := range []bermbin.Result{waitA(), waitB()} {
		if r.Exit != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		}
	}
	read := func(name string) uint64 {
		b, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		return hostUID(t, string(b))
	}
	ua, ub, ga, gb := read("a.uid"), read("b.uid"), read("a.gid"), read("b.gid")
	if ua == ub || ga == gb {
		t.Errorf("two running calls share host ids: uids %d %d, gids %d %d", ua, ub, ga, gb)
	}
	for _, id := range []uint64{ua, ub, ga, gb} {
		if id == 0 || id == 65534 || id < 65536 {
			t.Errorf("host id %d: not one of the subordinate range (root, nobody or a host user's)", id)
		}
	}
	// What the tools made belongs to the workspace's owner on the host, not to their ids.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "a.uid"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("a file the tool made is owned by %d:%d on the host, not by the workspace's owner 65534:65534", st.Uid, st.Gid)
	}
}

// A newcomer's first try: a root-owned 0700 workspace (mktemp -d under sudo) works, and the
// tool's files belong to root on the host while the tool itself never is root.
func TestRootOwnedPrivateWorkspaceWorks(t *testing.T) {
	bermbin.RequireRoot(t)
	ws, err := os.MkdirTemp("", "berm-root-ws-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ws)
	if err := os.Chmod(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	r := run(t, t.TempDir(), "--call-id", "root-ws", "--workspace", ws, "--", "sh", "-c",
		`echo hi > f && mkdir d && echo in > d/g && id -u && stat -c '%u' .`)
	if r.Exit != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	lines := strings.Fields(r.Stdout)
	if len(lines) != 2 || lines[0] == "0" || lines[0] != lines[1] {
		t.Errorf("inside, the tool should be a non-root uid owning its workspace; got id -u and the workspace's owner %q", lines)
	}
	for _, name := range []string{"f", "d", "d/g"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s is owned by %d:%d on the host, not by the workspace's owner root", name, st.Uid, st.Gid)
		}
	}
}

// A host user other than root cannot read a running call's environment, memory or root: the
// call's uid is its own, not a host user's (nobody's, as before).
func TestHostUsersCannotReachACall(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	wait := background(t, state, "--call-id", "reach", "--timeout", "60s", "--workspace", ws, "--env", "BERM_TEST_SECRET=s3cr3t",
		"--", "sh", "-c", `touch ready; while [ ! -e done ]; do sleep 0.02; done`)
	defer func() {
		os.WriteFile(filepath.Join(ws, "done"), nil, 0o644)
		if r := wait(); r.Exit != 0 {
			t.Errorf("exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
		}
	}()
	waitFile(t, filepath.Join(ws, "ready"))
	pid := callProcess(t, "reach", "sh")
	for _, uid := range []uint32{65534, 4242} {
		for _, f := range []string{"environ", "mem", "root/"} {
			target := fmt.Sprintf("/proc/%d/%s", pid, f)
			var cmd *exec.Cmd
			if f == "mem" {
				cmd = exec.Command("dd", "if="+target, "bs=1", "count=1", "skip=4194304")
			} else if f == "root/" {
				cmd = exec.Command("ls", target)
			} else {
				cmd = exec.Command("cat", target)
			}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			out, err := cmd.CombinedOutput()
			if err == nil || strings.Contains(string(out), "s3cr3t") || strings.Contains(string(out), "ready") {
				t.Errorf("host uid %d reached %s: %v\n%s", uid, target, err, out)
			}
		}
	}
}

// callProcess finds the host pid of a call's process named comm, by the call's cgroup.
func callProcess(t *testing.T, callID, comm string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.Contains(string(cg), "/"+callID+"\n") && strings.TrimSpace(string(c)) == comm {
			return pid
		}
	}
	t.Fatalf("no process %s in call %s", comm, callID)
	return 0
}

// A call that holds every inotify instance its uid may have does not leave another call (or
// the host's root) without one: per-user kernel limits are per call.
func TestInotifyLimitsAreNotShared(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := bermbin.Workspace(t)
	hog := `import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.inotify_init() >= 0:
    n += 1
print("held", n, "errno", ctypes.get_errno())
open("ready", "w").close()
while not os.path.exists("done"):
    time.sleep(0.02)
`
	other := `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
print("fd", fd, "errno", ctypes.get_errno())
`
	// inotify is refused by default (spec.syscalls.denyFileWatch): a policy that allows it.
	pol := filepath.Join(t.TempDir(), "watch.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: watch}\nspec:\n  syscalls: {denyFileWatch: false}\n"), 0o644)
	waitHog := background(t, t.TempDir(), "--call-id", "inotify-hog", "--timeout", "60s", "--workspace", ws, "--policy", pol, "--", "python3", "-c", hog)
	waitFile(t, filepath.Join(ws, "ready"))
	r := run(t, t.TempDir(), "--call-id", "inotify-other", "--workspace", ws, "--policy", pol, "--", "python3", "-c", other)
	os.WriteFile(filepath.Join(ws, "done"), nil, 0o644)
	h := waitHog()
	if h.Exit != 0 || !strings.Contains(h.Stdout, "errno 24") {
		t.Fatalf("the hog did not exhaust its inotify instances (EMFILE):\n%s\n%s", h.Stdout, h.Stderr)
	}
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "fd ") || strings.HasPrefix(r.Stdout, "fd -1") {
		t.Errorf("another call got no inotify instance while the hog held its own:\n%s\n%s\n(hog: %s)", r.Stdout, r.Stderr, h.Stdout)
	}
}

// What a call makes in a root-owned workspace belongs to root on the host: it must not be able
// to leave a setuid or setgid program there for a host user to run as root.
func TestNoSetIDFilesInTheWorkspace(t *testing.T) {
	bermbin.RequireRoot(t)
	ws, err := os.MkdirTemp("", "berm-setid-ws-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ws)
	os.Chmod(ws, 0o755)
	state := t.TempDir()
	r := run(t, state, "--call-id", "setid", "--workspace", ws, "--", "sh", "-c", `cp /usr/bin/id ./a && chmod 4755 a; echo "chmod=$?"
chmod g+s a; echo "chmodg=$?"
python3 -c 'import os; os.open("b", os.O_CREAT|os.O_WRONLY, 0o6755)'; echo "create=$?"
mkdir -m 2755 c; echo "mkdir=$?"`)
	for _, refused := range []string{"chmod", "chmodg", "create", "mkdir"} {
		if !strings.Contains(r.Stdout, refused+"=") || strings.Contains(r.Stdout, refused+"=0\n") {
			t.Errorf("want %s refused:\n%s\n%s", refused, r.Stdout, r.Stderr)
		}
	}
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s has %v on the host", p, fi.Mode())
		}
		return nil
	})
	if a, err := os.Stat(filepath.Join(ws, "a")); err != nil || a.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("the tool's copy should exist, root's on the host: %v", err)
	}
	tl := bermbin.Timeline(t, state, "setid")
	found := false
	for _, e := range tl.Events {
		if e.Denial != nil && e.Denial.Layer == "seccomp" && strings.Contains(e.Denial.Rule, "setuid") && strings.Contains(e.Denial.Object, "/a") {
			found = true
		}
	}
	if !found {
		t.Errorf("no denial for the setuid chmod: %+v", denials(tl.Events))
	}
}

// Through bermd, a warm sandbox prepares the idmap of its tenant's last workspace owner; a
// call whose workspace has another owner still gets its own: what each tool makes belongs to
// its workspace's owner.
func TestWarmSandboxesMapEachCallsOwner(t *testing.T) {
	bermbin.RequireRoot(t)
	socket, log := startBermd(t)
	for i, owner := range []int{65534, 0, 4242, 4242} {
		ws := bermbin.Workspace(t)
		os.Chown(ws, owner, owner)
		r := bermbin.Berm(t, nil, "run", "--socket", socket, "--daemon", "required", "--workspace", ws, "--", "sh", "-c", "echo x > f")
		if r.Exit != 0 {
			t.Fatalf("call %d: exit %d\n%s\n%s\nbermd:\n%s", i, r.Exit, r.Stdout, r.Stderr, log)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(ws, "f"), &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != owner || int(st.Gid) != owner {
			t.Errorf("call %d: f is owned by %d:%d, not by the workspace's owner %d", i, st.Uid, st.Gid, owner)
		}
	}
}

// A file of someone else in the workspace (root's, as the directory a host mount sits on) has
// an owner the tool is not, and the kernel's answers say so: writing it and changing its mode
// are refused with EACCES and EPERM, its content stays; unlinking it is what unlinking someone
// else's file in a directory of one's own is on any Unix system (allowed: the workspace's
// entries are the tool's to remove). No answer is EOVERFLOW, which an owner the workspace's
// idmap did not map gave every one of them.
func TestSomeoneElsesFileInTheWorkspaceGetsClearAnswers(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := bermbin.Workspace(t)
	for _, f := range []string{"roots", "roots2"} {
		if err := os.WriteFile(filepath.Join(ws, f), []byte("root's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, t.TempDir(), "--call-id", "foreign", "--workspace", ws, "--", "sh", "-c",
		`echo x >> roots; echo "write=$?"; chmod 666 roots; echo "chmod=$?"; touch -d 2001-01-01 roots; echo "touch=$?"; rm -f roots2; echo "rm=$?"`)
	t.Logf("exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	if strings.Contains(r.Stderr, "too large") {
		t.Errorf("an answer reads EOVERFLOW:\n%s", r.Stderr)
	}
	for _, want := range []string{"write=2", "chmod=1", "touch=1", "rm=0"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("want %s in\n%s", want, r.Stdout)
		}
	}
	for _, want := range []string{"Permission denied", "Operation not permitted"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("want %q in the tool's errors:\n%s", want, r.Stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "roots")); string(b) != "root's\n" {
		t.Errorf("root's file changed: %q", b)
	}
}
