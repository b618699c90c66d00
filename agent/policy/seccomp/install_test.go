package seccomp

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

// Kernel tests re-execute the test binary: a filter never comes off, so each case installs it
// in a child process, makes syscalls and reports the errnos.
const childName = "seccomp"

type childSpec struct {
	Filter  Filter
	NoApply bool // control run
	X32     bool // make one x32-ABI syscall (the filter should kill the process)
}

// The probes the child makes, in order.
var probes = []string{"getpid", "unshare(CLONE_NEWUTS)", "unshare(CLONE_FILES)", "ptrace(PTRACE_PEEKDATA)", "mount"}

type childResult struct {
	Errs []string
	Err  string
}

func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Children{childName: testutil.JSONChild(runChild)})
}

func runChild(spec childSpec) (res childResult) {
	// A thread that exists before Install makes the probes: it only sees the filter if TSYNC
	// carried it over.
	start, done := make(chan struct{}), make(chan []string)
	go func() {
		runtime.LockOSThread()
		<-start
		done <- doProbes(spec.X32)
	}()
	if !spec.NoApply {
		p, err := spec.Filter.Program()
		if err != nil {
			res.Err = err.Error()
			return
		}
		if err := Install(p, TSync); err != nil {
			res.Err = err.Error()
			return
		}
	}
	close(start)
	res.Errs = <-done
	return
}

func doProbes(x32 bool) []string {
	if x32 {
		_, _, _ = unix.RawSyscall(unix.SYS_GETPID|x32Bit, 0, 0, 0)
	}
	name := func(e syscall.Errno) string {
		if e == 0 {
			return ""
		}
		return unix.ErrnoName(e)
	}
	var out []string
	_, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
	out = append(out, name(e))
	// unsharing only this locked thread's UTS namespace is harmless to the test process
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUTS, 0, 0)
	out = append(out, name(e))
	_, _, e = unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_FILES, 0, 0)
	out = append(out, name(e))
	_, _, e = unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getppid()), 0, 0, 0, 0)
	out = append(out, name(e))
	// an invalid mount: reaching the kernel's mount code gives EFAULT/EINVAL/ENOENT, not EPERM
	_, _, e = unix.RawSyscall6(unix.SYS_MOUNT, 0, 0, 0, 0, 0, 0)
	out = append(out, name(e))
	return out
}

func runInChild(t *testing.T, spec childSpec) (childResult, *exec.ExitError) {
	t.Helper()
	var res childResult
	if ee := testutil.RunJSON(t, testutil.JSONCommand(t, childName, spec), &res); ee != nil {
		return childResult{}, ee
	}
	if res.Err != "" {
		t.Fatalf("child: %s", res.Err)
	}
	return res, nil
}

func requireSeccomp(t *testing.T) {
	t.Helper()
	// unprivileged the probes fail with EPERM by themselves, so a pass would prove nothing
	testutil.RequireRoot(t, "the control run must be able to unshare and mount")
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		testutil.Unavailable(t, "seccomp unavailable: %v", err)
	}
}

func TestInstall(t *testing.T) {
	requireSeccomp(t)
	policy := func(deny Action) Filter {
		return Filter{
			Default: Allow,
			BadArch: KillProcess,
			Rules: []Rule{
				{Nr: unix.SYS_UNSHARE, Arg: &Arg{Any: unix.CLONE_NEWUTS | unix.CLONE_NEWNS | unix.CLONE_NEWUSER}, Action: deny},
				{Nr: unix.SYS_PTRACE, Action: deny},
				{Nr: unix.SYS_MOUNT, Action: deny},
			},
		}
	}
	for _, tc := range []struct {
		name string
		spec childSpec
		want []string // per probe; "*" = anything but EPERM
	}{
		{"control", childSpec{Filter: policy(Errno(unix.EPERM)), NoApply: true}, []string{"", "", "", "*", "*"}},
		{"enforce", childSpec{Filter: policy(Errno(unix.EPERM))}, []string{"", "EPERM", "", "EPERM", "EPERM"}},
		{"audit", childSpec{Filter: policy(Log)}, []string{"", "", "", "*", "*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, ee := runInChild(t, tc.spec)
			if ee != nil {
				t.Fatalf("child died: %v", ee)
			}
			for i, p := range probes {
				got, want := res.Errs[i], tc.want[i]
				if want == "*" && got == "EPERM" || want != "*" && got != want {
					t.Errorf("%s: got %q, want %q", p, got, want)
				}
			}
		})
	}
}

func TestInstallKillsOtherABI(t *testing.T) {
	requireSeccomp(t)
	_, ee := runInChild(t, childSpec{X32: true, Filter: Filter{Default: Allow, BadArch: KillProcess}})
	if ee == nil {
		t.Fatal("an x32 syscall got through")
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Fatalf("child ended with %v, want SIGSYS", ee)
	}
}

func TestInstallRefusesWithoutThreadChoice(t *testing.T) {
	if err := Install([]unix.SockFilter{ret(Allow)}, 0); err == nil {
		t.Fatal("installed without TSync or NoTSync")
	}
}
