package policy

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// The judge names a seccomp denial from the traced syscall: the rule whose narrowing matches
// the call's arguments, when the result is the errno that rule returns (or, for a fatal
// rule, whatever the killed call shows).
func TestJudgeSeccompDenials(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	compile := func(spec string) *Judge { return compileJudge(t, env, spec) }
	strict := compile("  mode: enforce\n")
	audit := compile("  mode: audit\n")
	fatal := compile("  syscalls:\n    fatal: [ptrace, socket]\n")
	eperm, noaf := -int64(unix.EPERM), -int64(unix.EAFNOSUPPORT)
	for _, tc := range []struct {
		name   string
		j      *Judge
		sys    string
		args   [6]uint64
		result int64
		rule   string // "" = no denial
	}{
		{"TIOCSTI", strict, "ioctl", [6]uint64{0, unix.TIOCSTI}, eperm, "spec.syscalls.denyTerminalInjection: deny ioctl TIOCSTI and TIOCLINUX"},
		{"TIOCSTI high bits", strict, "ioctl", [6]uint64{0, 1<<32 | unix.TIOCSTI}, eperm, "spec.syscalls.denyTerminalInjection"},
		{"TIOCLINUX", strict, "ioctl", [6]uint64{1, unix.TIOCLINUX}, eperm, "spec.syscalls.denyTerminalInjection"},
		{"TCGETS failing", strict, "ioctl", [6]uint64{0, unix.TCGETS}, -int64(unix.ENOTTY), ""},
		{"inotify_init1", strict, "inotify_init1", [6]uint64{}, eperm, "spec.syscalls.denyFileWatch: deny inotify_init1"},
		{"fanotify_init", strict, "fanotify_init", [6]uint64{}, eperm, "spec.syscalls.denyFileWatch: deny fanotify_init"},
		{"memfd exec", strict, "memfd_create", [6]uint64{0, unix.MFD_EXEC}, eperm, "spec.syscalls.denyExecutableMemfd: deny memfd_create with MFD_EXEC"},
		{"memfd plain", strict, "memfd_create", [6]uint64{0, unix.MFD_CLOEXEC}, 3, ""},
		{"fexecve", strict, "execveat", [6]uint64{3, 0, 0, 0, unix.AT_EMPTY_PATH}, eperm, "spec.syscalls.denyExecutableMemfd: deny execveat with AT_EMPTY_PATH"},
		{"ax25", strict, "socket", [6]uint64{unix.AF_AX25, unix.SOCK_DGRAM}, noaf, "spec.network.allowNetlink: socket families other than unix, inet and inet6"},
		{"netlink", strict, "socket", [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW}, noaf, "spec.network.allowNetlink"},
		// the family passed the filter: the kernel's own EAFNOSUPPORT is not a seccomp denial
		{"inet refused by the kernel", strict, "socket", [6]uint64{unix.AF_INET, 99}, noaf, ""},
		{"socketpair inet", strict, "socketpair", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, noaf, "socketpair families other than unix"},
		{"audit TIOCSTI", audit, "ioctl", [6]uint64{0, unix.TIOCSTI}, 0, "spec.syscalls.denyTerminalInjection"},
		{"fatal ptrace killed", fatal, "ptrace", [6]uint64{16, 1}, unix.SYS_PTRACE, "spec.syscalls.deny[15]: deny ptrace; fatal (spec.syscalls.fatal[0])"},
		{"fatal family killed", fatal, "socket", [6]uint64{unix.AF_X25}, unix.SYS_SOCKET, "fatal (spec.syscalls.fatal[1])"},
		{"fatal socket, family allowed", fatal, "socket", [6]uint64{unix.AF_INET}, 3, ""},
		// glibc's threads and posix_spawn try clone3 first and take ENOSYS as "use clone":
		// the program's normal path, not a denial; the clone it falls back to is judged.
		{"clone3 answered ENOSYS is libc's fallback", strict, "clone3", [6]uint64{}, -int64(unix.ENOSYS), ""},
		{"clone3 in audit mode", audit, "clone3", [6]uint64{}, 4242, ""},
		{"clone into a new user namespace", strict, "clone", [6]uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm, "spec.syscalls.denyNewNamespaces: deny clone into new namespaces"},
		{"clone of a thread", strict, "clone", [6]uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, 4242, ""},
		{"unshare of a mount namespace", strict, "unshare", [6]uint64{unix.CLONE_NEWNS}, eperm, "spec.syscalls.denyNewNamespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr, err := event.SyscallNumber(tc.sys)
			if err != nil {
				t.Fatal(err)
			}
			ev := event.Event{Kind: event.KindSyscall, Syscall: &event.Syscall{Nr: nr, Name: tc.sys, Args: tc.args, Result: tc.result}}
			d := tc.j.Denial(&ev)
			switch {
			case tc.rule == "" && d != nil:
				t.Fatalf("denial %+v, want none", d)
			case tc.rule == "":
			case d == nil:
				t.Fatalf("no denial, want %q", tc.rule)
			case d.Layer != "seccomp" || d.Object != tc.sys || !strings.HasPrefix(d.Rule, tc.rule) && !strings.Contains(d.Rule, tc.rule) || d.Audit != (tc.j == audit):
				t.Fatalf("denial %+v, want seccomp %s by %q", d, tc.sys, tc.rule)
			}
		})
	}
}

// The end of a call whose tool died of SIGSYS names the fatal syscall: the one seen, else the
// only one listed, else the list.
func TestFatalEnd(t *testing.T) {
	one := &Compiled{Mode: Enforce, Fatal: map[uint32]bool{unix.SYS_PTRACE: true}}
	two := &Compiled{Mode: Enforce, Fatal: map[uint32]bool{unix.SYS_PTRACE: true, unix.SYS_BPF: true}}
	for _, tc := range []struct {
		c    *Compiled
		seen string
		want string // "" = not a fatal end
	}{
		{one, "ptrace", "fatal syscall attempted: ptrace (spec.syscalls.fatal; killed by the seccomp filter)"},
		{one, "", "fatal syscall attempted: ptrace (spec.syscalls.fatal; killed by the seccomp filter, its event was not seen)"},
		{two, "", "a spec.syscalls.fatal syscall attempted (one of [bpf ptrace]; killed by the seccomp filter, its event was not seen)"},
		{&Compiled{Mode: Enforce}, "", ""},
		{&Compiled{Mode: Audit, Fatal: one.Fatal}, "ptrace", ""},
	} {
		got, ok := tc.c.FatalEnd(tc.seen)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("FatalEnd(%q) = %q %v, want %q", tc.seen, got, ok, tc.want)
		}
	}
}

// compileSpec compiles a policy with spec (YAML under spec:) in env.
func compileSpec(t *testing.T, env CompileEnv, spec string) *Compiled {
	t.Helper()
	p, err := Parse("p.yaml", []byte(header+"spec:\n"+spec))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// compileJudge is the judge of a policy with spec (YAML under spec:) in env.
func compileJudge(t *testing.T, env CompileEnv, spec string) *Judge {
	t.Helper()
	return &Judge{Compiled: compileSpec(t, env, spec), Workspace: env.Workspace}
}
