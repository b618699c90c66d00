package sandboxer_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
	"github.com/bermsec/berm/testenv/bermbin"
)

func denials(evs []event.Event) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Kind == event.KindDenial {
			out = append(out, e)
		}
	}
	return out
}

func findDenial(evs []event.Event, layer, objectSuffix string, audit bool) *event.Event {
	for i, e := range evs {
		if e.Denial != nil && e.Denial.Layer == layer && strings.HasSuffix(e.Denial.Object, objectSuffix) && e.Denial.Audit == audit {
			return &evs[i]
		}
	}
	return nil
}

// The seed incident: a "clean up temp files" tool deletes workspace/temp, where temp is a
// separate file system (the customer's storage bucket) bound into the workspace. Under berm
// every file of that file system survives, its mount on the host stays, and the timeline says
// what was tried and refused.
func TestSeedIncidentContained(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	bucket := filepath.Join(t.TempDir(), "bucket")
	os.MkdirAll(bucket, 0o755)
	if err := unix.Mount("bucket", bucket, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(bucket, unix.MNT_DETACH)
	var files []string
	for i := 0; i < 20; i++ {
		f := filepath.Join(bucket, fmt.Sprintf("customer-%02d.csv", i))
		os.WriteFile(f, []byte("row\n"), 0o666)
		files = append(files, f)
	}
	os.Chmod(bucket, 0o777)
	temp := filepath.Join(ws, "temp")
	os.Mkdir(temp, 0o777)
	if err := unix.Mount(bucket, temp, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(temp, unix.MNT_DETACH)

	tool := filepath.Join(bermbin.RepoRoot(), "testenv", "tools", "cleanup_temp.py")
	script, _ := os.ReadFile(tool)
	os.WriteFile(filepath.Join(ws, "cleanup.py"), script, 0o644)
	r := run(t, state, "--call-id", "seed", "--tool", "cleanup-temp", "--workspace", ws, "--", "python3", "cleanup.py")
	t.Logf("tool exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	// The tool learns why: the refusal reads EPERM (a folder not its own) or EBUSY (a mount
	// point), never EOVERFLOW ("Value too large for defined data type").
	if !strings.Contains(r.Stderr, "[Errno 1] Operation not permitted") && !strings.Contains(r.Stderr, "[Errno 16] Device or resource busy") {
		t.Errorf("the tool's error is not EPERM or EBUSY:\n%s", r.Stderr)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("customer file lost: %v", err)
		}
	}
	if err := exec.Command("mountpoint", "-q", temp).Run(); err != nil {
		t.Fatalf("the bucket's mount at %s was detached from the host", temp)
	}
	tl := bermbin.Timeline(t, state, "seed")
	if d := findDenial(tl.Events, "mount", "/temp", false); d == nil {
		t.Fatalf("no denial for the delete of temp in the timeline: %+v", denials(tl.Events))
	}
	var tried bool
	for _, e := range tl.Events {
		tried = tried || (e.Syscall != nil && (e.Syscall.Name == "rmdir" || e.Syscall.Name == "unlinkat") && strings.HasSuffix(e.Syscall.Path, "temp"))
	}
	if !tried {
		t.Error("the delete attempt itself is not in the timeline")
	}
	if tl.Call.Record.Denials["policy"] == 0 {
		t.Errorf("record counts no policy denials: %+v", tl.Call.Record.Denials)
	}
}

// Each file system, exec and escape layer refuses and reports, in enforce mode; in audit mode
// the same actions go through and are recorded as would-be denials.
func TestFilesystemExecAndEscapeDenials(t *testing.T) {
	bermbin.RequireRoot(t)
	// A host file outside the call's root: reading it is refused (it is not there). A path the
	// host does not have either withholds nothing: no denial (a program's probe of a missing
	// ~/.curlrc is its normal path).
	hiddenFile, err := os.CreateTemp("/var/tmp", "berm-hidden-")
	if err != nil {
		t.Fatal(err)
	}
	hiddenFile.Close()
	hidden := hiddenFile.Name()
	defer os.Remove(hidden)
	script := `cat /etc/ssh/ssh_config > /dev/null; echo "read=$?"
echo x > /etc/berm-test-file; echo "write=$?"
cat ` + hidden + ` 2>/dev/null; echo "hidden=$?"
cat /home/nothing 2>/dev/null; echo "nothing=$?"
cp /usr/bin/true ./mytrue && ./mytrue; echo "exec=$?"
echo $$ > /sys/fs/cgroup/unified/cgroup.procs; echo "cgroup=$?"
`
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) {
			state, ws := t.TempDir(), bermbin.Workspace(t)
			args := []string{"--call-id", "layers-" + mode, "--workspace", ws}
			if mode == "audit" {
				pol := filepath.Join(t.TempDir(), "audit.yaml")
				os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: strict-audit}\nspec: {mode: audit}\n"), 0o644)
				args = append(args, "--policy", pol)
			}
			r := run(t, state, append(args, "--", "sh", "-c", script)...)
			defer os.Remove("/etc/berm-test-file")
			tl := bermbin.Timeline(t, state, "layers-"+mode)
			audit := mode == "audit"
			if audit {
				if !strings.Contains(r.Stdout, "read=0") || !strings.Contains(r.Stdout, "exec=0") {
					t.Errorf("audit mode blocked something: %s", r.Stdout)
				}
			} else {
				for _, want := range []string{"read=1", "write=2", "hidden=1", "exec=126", "cgroup=2"} {
					if !strings.Contains(r.Stdout, want) {
						t.Errorf("enforce: want %s in\n%s\n%s", want, r.Stdout, r.Stderr)
					}
				}
			}
			checks := []struct{ layer, object string }{
				{"landlock", "/etc/ssh/ssh_config"},
				{"landlock", "/mytrue"},
			}
			if !audit {
				checks = append(checks, struct{ layer, object string }{"mount", "/etc/berm-test-file"},
					struct{ layer, object string }{"mount", hidden},
					struct{ layer, object string }{"mount", "/sys/fs/cgroup/unified/cgroup.procs"})
			} else {
				checks = append(checks, struct{ layer, object string }{"landlock", "/sys/fs/cgroup/unified/cgroup.procs"})
			}
			if d := findDenial(tl.Events, "mount", "/home/nothing", audit); d != nil {
				t.Errorf("a read of a path the host does not have either is a denial: %+v", d.Denial)
			}
			for _, c := range checks {
				d := findDenial(tl.Events, c.layer, c.object, audit)
				if d == nil {
					t.Errorf("no %s denial (audit=%v) for %s; denials: %+v", c.layer, audit, c.object, denials(tl.Events))
					continue
				}
				if d.CallID != "layers-"+mode || d.Denial.Rule == "" {
					t.Errorf("denial lacks call id or rule: %+v", d)
				}
			}
		})
	}
}

// Every syscall the strict policy denies returns EPERM and is a seccomp denial in the
// timeline, with the rule that fired.
func TestEachDeniedSyscall(t *testing.T) {
	bermbin.RequireRoot(t)
	var names []string
	var nrs []string
	seen := map[string]bool{}
	p := policy.Strict()
	for _, n := range p.Spec.Syscalls.Deny {
		nr, err := event.SyscallNumber(n)
		if err != nil || seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
		nrs = append(nrs, fmt.Sprint(nr))
	}
	names = append(names, "unshare", "setns")
	nrs = append(nrs, "272:0x20000", "308")
	py := `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for spec in sys.argv[1:]:
    nr, _, arg = spec.partition(":")
    a0 = int(arg, 16) if arg else 0
    r = libc.syscall(int(nr), ctypes.c_long(a0), 0, 0, 0, 0, 0)
    print(nr, r, ctypes.get_errno())
`
	state := t.TempDir()
	r := run(t, state, append([]string{"--call-id", "syscalls", "--", "python3", "-c", py}, nrs...)...)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%d results for %d syscalls:\n%s", len(lines), len(names), r.Stdout)
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[1] != "-1" || f[2] != fmt.Sprint(int(unix.EPERM)) {
			t.Errorf("%s: got %q, want -1 EPERM", names[i], l)
		}
	}
	tl := bermbin.Timeline(t, state, "syscalls")
	for _, n := range names {
		d := findDenial(tl.Events, "seccomp", n, false)
		if d == nil {
			t.Errorf("no seccomp denial for %s", n)
		} else if !strings.Contains(d.Denial.Rule, "spec.syscalls") {
			t.Errorf("%s: rule %q does not name the policy field", n, d.Denial.Rule)
		}
	}
}

// A policy can make a refused syscall fatal: the seccomp filter kills the tool (SIGSYS) and
// the call ends as policy_kill naming the syscall, with its own exit status (event.StatusPolicyKill).
func TestFatalSyscallEndsTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	state := t.TempDir()
	pol := filepath.Join(t.TempDir(), "fatal.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: strict-fatal}\nspec:\n  syscalls:\n    fatal: [ptrace]\n"), 0o644)
	script := `import ctypes, time
ctypes.CDLL(None).ptrace(16, 1, 0, 0)
time.sleep(30)
print("survived")`
	start := time.Now()
	r := run(t, state, "--call-id", "fatal", "--policy", pol, "--", "python3", "-c", script)
	if r.Exit != event.StatusPolicyKill || strings.Contains(r.Stdout, "survived") {
		t.Fatalf("exit %d, stdout %q: the call survived its fatal syscall", r.Exit, r.Stdout)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("the call ran on after its fatal syscall")
	}
	tl := bermbin.Timeline(t, state, "fatal")
	if rec := tl.Call.Record; rec == nil || rec.EndReason != event.EndPolicyKill || !strings.Contains(rec.EndDetail, "ptrace") {
		t.Fatalf("record: %+v", tl.Call.Record)
	}
	if findDenial(tl.Events, "seccomp", "ptrace", false) == nil {
		t.Fatal("no seccomp denial for ptrace")
	}
	// A fatal syscall the policy does not deny is a policy error, with its field.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bad}\nspec:\n  syscalls:\n    fatal: [getpid]\n"), 0o644)
	r = run(t, state, "--policy", bad, "--", "true")
	if r.Exit == 0 || !strings.Contains(r.Stderr, "spec.syscalls.fatal[0]") {
		t.Fatalf("fatal getpid accepted: exit %d %s", r.Exit, r.Stderr)
	}
}

// The call cannot see host processes, signal one, or gain privileges from a setuid binary.
func TestEscapePathsClosed(t *testing.T) {
	bermbin.RequireRoot(t)
	host := exec.Command("sleep", "30")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	state := t.TempDir()
	script := fmt.Sprintf(`ls /proc | grep -c '^[0-9]'
kill -0 %d 2>/dev/null; echo "kill=$?"
python3 -c 'import ctypes; print("ptrace", ctypes.CDLL(None).ptrace(16, %d, 0, 0))'
su -c id root </dev/null >/dev/null 2>&1; echo "su=$?"
id -u`, host.Process.Pid, host.Process.Pid)
	r := run(t, state, "--call-id", "escape", "--", "sh", "-c", script)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("unexpected output:\n%s\n%s", r.Stdout, r.Stderr)
	}
	if n := strings.TrimSpace(lines[0]); n == "" || len(n) > 1 {
		t.Errorf("the call sees %s processes in /proc: host processes leak in", n)
	}
	if lines[1] == "kill=0" {
		t.Error("the call could signal a host process")
	}
	if lines[2] != "ptrace -1" {
		t.Errorf("ptrace of a host process: %s", lines[2])
	}
	if lines[3] == "su=0" || lines[4] != strconv.Itoa(sandboxinit.ToolUID) {
		t.Errorf("privilege gained: %s, uid %s", lines[3], lines[4])
	}
}

// A hard link in the workspace to another user's file elsewhere grants nothing: the file's
// owner maps to nobody in the call (the workspace's idmapped mount maps its owner alone), so
// only what it grants anyone remains. The tool cannot make such a link itself, and links
// whose every name is inside the workspace stay usable. No walk of the workspace per launch.
func TestHardLinkOutOfWorkspaceGrantsNothing(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	outside := filepath.Dir(ws)
	secret := filepath.Join(outside, "secret.txt")
	os.WriteFile(secret, []byte("top secret\n"), 0o600)
	public := filepath.Join(outside, "public.txt")
	os.WriteFile(public, []byte("public\n"), 0o644)
	for name, target := range map[string]string{"innocent.txt": secret, "readme.txt": public} {
		if err := os.Link(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("mine\n"), 0o644)
	os.Link(filepath.Join(ws, "a.txt"), filepath.Join(ws, "b.txt"))
	os.Chown(filepath.Join(ws, "a.txt"), 65534, 65534)
	r := run(t, state, "--call-id", "hardlink", "--workspace", ws, "--", "sh", "-c",
		`cat innocent.txt; echo "read=$?"; echo pwned >> readme.txt; echo "write=$?"; chmod 666 readme.txt; echo "chmod=$?"
ln /etc/hostname mylink; echo "link=$?"; cat b.txt; echo more >> b.txt; echo "own=$?"`)
	for _, refused := range []string{"read", "write", "chmod", "link"} {
		if !strings.Contains(r.Stdout, refused+"=") || strings.Contains(r.Stdout, refused+"=0\n") {
			t.Errorf("want %s refused:\n%s\n%s", refused, r.Stdout, r.Stderr)
		}
	}
	for _, want := range []string{"mine", "own=0"} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("want %s:\n%s\n%s", want, r.Stdout, r.Stderr)
		}
	}
	if strings.Contains(r.Stdout, "top secret") {
		t.Errorf("the hard link read another user's file")
	}
	if b, _ := os.ReadFile(public); string(b) != "public\n" {
		t.Errorf("the outside file changed: %q", b)
	}
	if st, _ := os.Stat(public); st.Mode().Perm() != 0o644 {
		t.Errorf("the outside file's mode changed: %v", st.Mode())
	}
}
