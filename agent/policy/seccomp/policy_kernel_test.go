package seccomp_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// These tests install the program a policy compiles to in a re-executed child (no root
// needed: Install sets no_new_privs) and make the syscalls the policy is about, so what is
// checked is the kernel running the real filter, not a model of it.
//
// To tell the filter's answer from the kernel's, the child first installs a marker filter
// that answers SECCOMP_RET_TRACE for the probed syscalls. With no tracer attached that fails
// the call with ENOSYS before the kernel runs it; of two filters the kernel takes the
// stronger action, and ERRNO and KILL are stronger than TRACE, TRACE stronger than ALLOW. So
// each probe returns the policy filter's errno when the policy refuses it and ENOSYS when the
// policy lets it through: never the kernel's own answer (EAFNOSUPPORT for a family this
// kernel lacks would otherwise look like a refusal).
const policyChildEnv = "BERM_SECCOMP_POLICY_CHILD"

type probe struct {
	Nr   uint32
	Args [6]uint64
	Ptrs []int // arguments that get a pointer to a zeroed buffer (an empty string, a char)
}

type policyChild struct {
	Prog   []unix.SockFilter
	Marker []uint32 // syscalls the marker filter answers with TRACE; none: no marker
	Probes []probe
}

func init() {
	if s := os.Getenv(policyChildEnv); s != "" {
		os.Exit(runPolicyChild(s))
	}
}

// runPolicyChild prints one line per probe as soon as it returns ("ok" or the errno name),
// so a probe that kills the child is the first one without a line.
func runPolicyChild(s string) int {
	var spec policyChild
	if err := json.Unmarshal([]byte(s), &spec); err != nil {
		fmt.Println("error:", err)
		return 2
	}
	runtime.LockOSThread()
	if len(spec.Marker) > 0 {
		m := seccomp.Filter{Default: seccomp.Allow, BadArch: seccomp.Allow}
		for _, nr := range spec.Marker {
			m.Rules = append(m.Rules, seccomp.Rule{Nr: nr, Action: seccomp.Action(unix.SECCOMP_RET_TRACE)})
		}
		p, err := m.Program()
		if err == nil {
			err = seccomp.Install(p, seccomp.TSync)
		}
		if err != nil {
			fmt.Println("error: marker:", err)
			return 2
		}
	}
	if spec.Prog != nil {
		if err := seccomp.Install(spec.Prog, seccomp.TSync); err != nil {
			fmt.Println("error:", err)
			return 2
		}
	}
	var buf [64]byte
	for _, p := range spec.Probes {
		a := p.Args
		for _, i := range p.Ptrs {
			a[i] = uint64(uintptr(unsafe.Pointer(&buf[0])))
		}
		_, _, e := unix.RawSyscall6(uintptr(p.Nr), uintptr(a[0]), uintptr(a[1]), uintptr(a[2]), uintptr(a[3]), uintptr(a[4]), uintptr(a[5]))
		res := "ok"
		if e != 0 {
			res = unix.ErrnoName(e)
		}
		os.Stdout.WriteString(res + "\n")
	}
	runtime.KeepAlive(&buf)
	return 0
}

// runProbes runs the probes under prog (nil: no policy filter) and returns one result per
// probe, and the signal that ended the child if one did.
func runProbes(t *testing.T, prog []unix.SockFilter, marker bool, probes []probe) ([]string, syscall.Signal) {
	t.Helper()
	spec := policyChild{Prog: prog, Probes: probes}
	if marker {
		seen := map[uint32]bool{}
		for _, p := range probes {
			if !seen[p.Nr] {
				seen[p.Nr] = true
				spec.Marker = append(spec.Marker, p.Nr)
			}
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), policyChildEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var sig syscall.Signal
	if ee, ok := err.(*exec.ExitError); ok {
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() {
			t.Fatalf("child: %v: %s", err, out)
		}
		sig = ws.Signal()
	} else if err != nil {
		t.Fatalf("child: %v", err)
	}
	lines := strings.Fields(string(out))
	for _, l := range lines {
		if strings.HasPrefix(l, "error") {
			t.Fatalf("child: %s", out)
		}
	}
	return lines, sig
}

func requireSeccompFilter(t *testing.T) {
	t.Helper()
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("seccomp unavailable: %v", err)
		}
		t.Skipf("seccomp unavailable: %v", err)
	}
}

// compile compiles the strict policy with spec lines over it.
func compile(t *testing.T, spec string) *policy.Compiled {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: t}\nspec:\n"+spec))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws, tmp := filepath.Join(dir, "ws"), filepath.Join(dir, "tmp")
	os.Mkdir(ws, 0o755)
	os.Mkdir(tmp, 0o755)
	c, err := p.Compile(policy.CompileEnv{Workspace: ws, Tmp: tmp, MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const afMax = 46 // AF_MAX on 6.x kernels: families 0..45

// Every address family, through socket() with two types and through socketpair(), against
// the strict filter with and without allowNetlink: only the listed families get past the
// filter, every other one is refused by the filter itself with EAFNOSUPPORT.
func TestSocketFamiliesRealFilter(t *testing.T) {
	requireSeccompFilter(t)
	strict := compile(t, "  mode: enforce\n")
	netlink := compile(t, "  network: {allowNetlink: true}\n")
	var probes []probe
	var names []string
	for fam := uint64(0); fam < afMax; fam++ {
		for _, typ := range []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
			probes = append(probes, probe{Nr: unix.SYS_SOCKET, Args: [6]uint64{fam, typ}})
			names = append(names, fmt.Sprintf("socket(%d, %d)", fam, typ))
		}
		probes = append(probes, probe{Nr: unix.SYS_SOCKETPAIR, Args: [6]uint64{fam, unix.SOCK_STREAM, 0}, Ptrs: []int{3}})
		names = append(names, fmt.Sprintf("socketpair(%d)", fam))
	}
	// The kernel reads an int family: the high word cannot smuggle a family past the filter
	// or make an allowed one look refused.
	probes = append(probes,
		probe{Nr: unix.SYS_SOCKET, Args: [6]uint64{1<<32 | unix.AF_NETLINK, unix.SOCK_DGRAM}},
		probe{Nr: unix.SYS_SOCKET, Args: [6]uint64{1<<32 | unix.AF_INET, unix.SOCK_STREAM}})
	names = append(names, "socket(1<<32|netlink)", "socket(1<<32|inet)")

	want := func(allowed map[uint64]bool) []string {
		var w []string
		for _, p := range probes {
			fam := uint64(uint32(p.Args[0]))
			ok := allowed[fam]
			if p.Nr == unix.SYS_SOCKETPAIR {
				ok = fam == unix.AF_UNIX
			}
			if ok {
				w = append(w, "ENOSYS") // through the policy filter, stopped by the marker
			} else {
				w = append(w, "EAFNOSUPPORT")
			}
		}
		return w
	}
	base := map[uint64]bool{unix.AF_UNIX: true, unix.AF_INET: true, unix.AF_INET6: true}
	withNetlink := map[uint64]bool{unix.AF_UNIX: true, unix.AF_INET: true, unix.AF_INET6: true, unix.AF_NETLINK: true}
	all := map[uint64]bool{}
	for f := uint64(0); f < afMax; f++ {
		all[f] = true
	}
	for _, tc := range []struct {
		name string
		prog []unix.SockFilter
		want []string
	}{
		// the marker alone: every probe stops at it, so an EAFNOSUPPORT below is the policy's
		{"marker only", nil, func() []string {
			w := want(all)
			for i, p := range probes {
				if p.Nr == unix.SYS_SOCKETPAIR {
					w[i] = "ENOSYS"
				}
			}
			return w
		}()},
		{"strict", strict.Seccomp, want(base)},
		{"allowNetlink", netlink.Seccomp, want(withNetlink)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sig := runProbes(t, tc.prog, true, probes)
			if sig != 0 || len(got) != len(probes) {
				t.Fatalf("child ended by %v after %d of %d probes", sig, len(got), len(probes))
			}
			for i := range probes {
				if got[i] != tc.want[i] {
					t.Errorf("%s: got %s, want %s", names[i], got[i], tc.want[i])
				}
			}
		})
	}
	// Without the marker the allowed families are real sockets and the others still fail.
	got, _ := runProbes(t, strict.Seccomp, false, []probe{
		{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}},
		{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM}},
		{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM}},
		{Nr: unix.SYS_SOCKETPAIR, Args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, Ptrs: []int{3}},
	})
	if strings.Join(got, " ") != "ok ok EAFNOSUPPORT ok" {
		t.Errorf("unmarked: got %v, want ok ok EAFNOSUPPORT ok", got)
	}
}

// The terminal, watches and executable memory, each under the strict policy (refused by the
// filter) and under a policy that turns the field off (let through).
func TestStrictRefusalsRealFilter(t *testing.T) {
	requireSeccompFilter(t)
	strict := compile(t, "  mode: enforce\n")
	off := compile(t, "  syscalls: {denyTerminalInjection: false, denyFileWatch: false, denyExecutableMemfd: false}\n")
	for _, tc := range []struct {
		name      string
		p         probe
		strict    string
		fieldsOff string
	}{
		{"ioctl TIOCSTI", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{0, unix.TIOCSTI}, Ptrs: []int{2}}, "EPERM", "ENOSYS"},
		{"ioctl TIOCLINUX", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{0, unix.TIOCLINUX}, Ptrs: []int{2}}, "EPERM", "ENOSYS"},
		{"ioctl TIOCSTI, high bits set", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{0, 1<<32 | unix.TIOCSTI}, Ptrs: []int{2}}, "EPERM", "ENOSYS"},
		{"ioctl TIOCSTI on fd 7", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{7, unix.TIOCSTI}, Ptrs: []int{2}}, "EPERM", "ENOSYS"},
		{"ioctl TCGETS", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{0, unix.TCGETS}, Ptrs: []int{2}}, "ENOSYS", "ENOSYS"},
		{"ioctl TIOCSTI as fd", probe{Nr: unix.SYS_IOCTL, Args: [6]uint64{unix.TIOCSTI, unix.TCGETS}, Ptrs: []int{2}}, "ENOSYS", "ENOSYS"},
		{"inotify_init", probe{Nr: unix.SYS_INOTIFY_INIT}, "EPERM", "ENOSYS"},
		{"inotify_init1", probe{Nr: unix.SYS_INOTIFY_INIT1, Args: [6]uint64{unix.IN_CLOEXEC}}, "EPERM", "ENOSYS"},
		{"fanotify_init", probe{Nr: unix.SYS_FANOTIFY_INIT, Args: [6]uint64{unix.FAN_CLASS_NOTIF | unix.FAN_REPORT_FID, unix.O_RDONLY}}, "EPERM", "ENOSYS"},
		{"memfd_create MFD_EXEC", probe{Nr: unix.SYS_MEMFD_CREATE, Args: [6]uint64{0, unix.MFD_EXEC | unix.MFD_CLOEXEC}, Ptrs: []int{0}}, "EPERM", "ENOSYS"},
		{"memfd_create MFD_EXEC, high bits set", probe{Nr: unix.SYS_MEMFD_CREATE, Args: [6]uint64{0, 1<<40 | unix.MFD_EXEC}, Ptrs: []int{0}}, "EPERM", "ENOSYS"},
		{"memfd_create plain", probe{Nr: unix.SYS_MEMFD_CREATE, Args: [6]uint64{0, unix.MFD_CLOEXEC}, Ptrs: []int{0}}, "ENOSYS", "ENOSYS"},
		{"memfd_create MFD_NOEXEC_SEAL", probe{Nr: unix.SYS_MEMFD_CREATE, Args: [6]uint64{0, unix.MFD_NOEXEC_SEAL}, Ptrs: []int{0}}, "ENOSYS", "ENOSYS"},
		{"execveat AT_EMPTY_PATH", probe{Nr: unix.SYS_EXECVEAT, Args: [6]uint64{3, 0, 0, 0, unix.AT_EMPTY_PATH}, Ptrs: []int{1}}, "EPERM", "ENOSYS"},
		{"execveat by path", probe{Nr: unix.SYS_EXECVEAT, Args: [6]uint64{uint64(uint32(0xffffff9c)), 0, 0, 0, 0}, Ptrs: []int{1}}, "ENOSYS", "ENOSYS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, run := range []struct {
				name string
				prog []unix.SockFilter
				want string
			}{{"marker only", nil, "ENOSYS"}, {"strict", strict.Seccomp, tc.strict}, {"fields off", off.Seccomp, tc.fieldsOff}} {
				got, sig := runProbes(t, run.prog, true, []probe{tc.p})
				if sig != 0 || len(got) != 1 || got[0] != run.want {
					t.Errorf("%s: got %v (signal %v), want %s", run.name, got, sig, run.want)
				}
			}
		})
	}
}

// A fatal syscall kills its process in the filter: nothing outside the kernel is involved,
// so no lost event can let it through. A narrowed refusal made fatal kills only the calls it
// refuses; audit mode kills nothing.
func TestFatalKilledByTheFilter(t *testing.T) {
	requireSeccompFilter(t)
	ppid := uint64(os.Getpid())
	ptrace := probe{Nr: unix.SYS_PTRACE, Args: [6]uint64{unix.PTRACE_PEEKDATA, ppid}}
	for _, tc := range []struct {
		name   string
		spec   string
		probes []probe
		lines  []string // printed before the end
		sig    syscall.Signal
	}{
		{"fatal ptrace", "  syscalls:\n    fatal: [ptrace]\n", []probe{{Nr: unix.SYS_GETPID}, ptrace, {Nr: unix.SYS_GETPID}}, []string{"ok"}, unix.SIGSYS},
		{"not fatal: refused", "  mode: enforce\n", []probe{ptrace, {Nr: unix.SYS_GETPID}}, []string{"EPERM", "ok"}, 0},
		{"fatal socket family", "  syscalls:\n    fatal: [socket]\n", []probe{
			{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_INET, unix.SOCK_DGRAM}},
			{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_AX25, unix.SOCK_DGRAM}},
			{Nr: unix.SYS_GETPID},
		}, []string{"ok"}, unix.SIGSYS},
		{"fatal unshare: new namespaces only", "  syscalls:\n    fatal: [unshare]\n", []probe{
			{Nr: unix.SYS_UNSHARE, Args: [6]uint64{unix.CLONE_FILES}},
			{Nr: unix.SYS_UNSHARE, Args: [6]uint64{unix.CLONE_NEWUSER}},
		}, []string{"ok"}, unix.SIGSYS},
		{"audit: logged, not killed", "  mode: audit\n  syscalls:\n    fatal: [socket]\n", []probe{
			{Nr: unix.SYS_SOCKET, Args: [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM}},
			{Nr: unix.SYS_GETPID},
		}, []string{"ok", "ok"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compile(t, tc.spec)
			got, sig := runProbes(t, c.Seccomp, false, tc.probes)
			if sig != tc.sig || strings.Join(got, " ") != strings.Join(tc.lines, " ") {
				t.Fatalf("got %v and signal %v, want %v and signal %v", got, sig, tc.lines, tc.sig)
			}
		})
	}
}
