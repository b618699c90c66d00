package seccomp

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Kernel tests re-execute the test binary: a filter never comes off, so each case installs it
// in a child process, makes syscalls and reports the errnos.
const childEnv = "BERM_SECCOMP_TEST_CHILD"

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
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func runChild(specJSON string) int {
	var spec childSpec
	var res childResult
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(res) }()
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		res.Err = err.Error()
		return 0
	}
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
			return 0
		}
		if err := Install(p, TSync); err != nil {
			res.Err = err.Error()
			return 0
		}
	}
	close(start)
	res.Errs = <-done
	return 0
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
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return childResult{}, ee
	}
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	if res.Err != "" {
		t.Fatalf("child: %s", res.Err)
	}
	return res, nil
}

func requireSeccomp(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		// unprivileged the probes fail with EPERM by themselves, so a pass would prove nothing
		t.Skip("needs root: the control run must be able to unshare and mount")
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		t.Skipf("seccomp unavailable: %v", err)
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
