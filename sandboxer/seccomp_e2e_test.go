package sandboxer_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/testenv/bermbin"
)

// stalledRules is a rules evaluator that stops at the tool's first flood event until the
// test releases it: a decoder stalled as a slow rule or a slow path lookup stalls it (which a
// hostile tool can provoke). Behind it the queue and the one-page ring fill, and every later
// event of the call is dropped in the kernel.
type stalledRules struct {
	once    sync.Once
	release chan struct{}
}

func (s *stalledRules) Eval(ev *event.Event) []event.Event {
	if ev.Kind == event.KindOpen && strings.HasPrefix(ev.Open.Path, "/nonexistent/") {
		s.once.Do(func() { <-s.release })
	}
	return nil
}

func (s *stalledRules) EndCall(string) {}

// A fatal syscall is enforced where no event can be lost: with the agent's decoder stalled and
// its ring full, the fatal attempt's event cannot reach user space, and the tool still dies
// of it and the call still ends as policy_kill. When the agent killed on seeing the refusal,
// the tool printed "survived" and ran on to its wall time.
func TestFatalSyscallUnderFlood(t *testing.T) {
	bermbin.RequireRoot(t)
	stall := &stalledRules{release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(stall.release)
		}
	}
	defer release()
	a, err := sandboxer.NewAgent(agent.Config{
		StateDir: t.TempDir(),
		Tracer:   tracer.Config{RingBytes: 4096, WakeupBytes: 2048},
		Rules:    stall,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pol, err := policy.Parse("fatal.yaml", []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: strict-fatal}\nspec:\n  syscalls:\n    fatal: [ptrace]\n"))
	if err != nil {
		t.Fatal(err)
	}
	script := `import ctypes, os
def flood(tag, n):
    i = 0
    while n < 0 or i < n:
        try: os.open("/nonexistent/%s%d" % (tag, i), 0)
        except OSError: pass
        i += 1
for k in range(2):
    if os.fork() == 0:
        flood("c%d-" % k, -1)
flood("m", 1000)
ctypes.CDLL(None).ptrace(16, 1, 0, 0)
print("survived", flush=True)
flood("after", -1)`
	limits := policy.StrictLimits()
	limits.WallTime = 30 * time.Second // a survivor floods on until then
	var stdout, stderr bytes.Buffer
	out, err := sandboxer.Run(sandboxer.Spec{
		CallID: "fatal-flood", Tool: "flood", Tenant: "default",
		Argv:      []string{"/usr/bin/python3", "-c", script},
		Workspace: bermbin.Workspace(t),
		Limits:    limits, Policy: pol,
		Init:   bermbin.Path(t, "berm-init"),
		Stdout: &stdout, Stderr: &stderr,
	}, sandboxer.Local{Agent: a})
	release()
	if out == nil {
		t.Fatal(err)
	}
	t.Logf("run: %v", err) // the end-of-call barrier gives up on the stalled decoder
	rec := out.Record
	t.Logf("exit %d, dropped %+v, end %s %q", out.ExitStatus, rec.Dropped, rec.EndReason, rec.EndDetail)
	if rec.EndReason == event.EndPolicyKill && !strings.Contains(rec.EndDetail, "not seen") {
		t.Errorf("the fatal attempt's event was seen: the stall did not hold")
	}
	if out.ExitStatus != event.StatusPolicyKill || strings.Contains(stdout.String(), "survived") {
		t.Fatalf("exit %d, stdout %q, stderr %q: the call survived its fatal syscall", out.ExitStatus, stdout.String(), stderr.String())
	}
	if rec.EndReason != event.EndPolicyKill || !strings.Contains(rec.EndDetail, "ptrace") {
		t.Fatalf("record: %s %q", rec.EndReason, rec.EndDetail)
	}
	if rec.Dropped.Kernel+rec.Dropped.User == 0 {
		t.Fatal("the flood lost no event: this run does not show a kill independent of the trail")
	}
}

// The strict policy's argument-narrowed refusals, made by a real tool through berm run: each
// fails with the filter's errno and is a seccomp denial in the timeline naming its policy
// field; the same syscalls with harmless arguments pass.
func TestStrictNarrowedRefusals(t *testing.T) {
	bermbin.RequireRoot(t)
	py := `import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(64)
def sc(name, nr, *a):
    a = [buf if x == "buf" else ctypes.c_long(x) for x in a]
    r = libc.syscall(nr, *a)
    print(name, r, ctypes.get_errno() if r < 0 else 0, flush=True)
sc("tiocsti", 16, 0, 0x5412, "buf")
sc("tioclinux", 16, 0, 0x541c, "buf")
sc("tiocsti-high", 16, 0, (1 << 32) | 0x5412, "buf")
sc("inotify_init1", 294, 0)
sc("fanotify_init", 300, 0x200, 0)
sc("memfd-exec", 319, "buf", 0x10)
sc("memfd-plain", 319, "buf", 1)
sc("socket-ax25", 41, 3, 2, 0)
sc("socket-netlink", 41, 16, 3, 0)
sc("socketpair-inet", 53, 2, 1, 0, "buf")
sc("socket-inet", 41, 2, 2, 0)
`
	state := t.TempDir()
	r := run(t, state, "--call-id", "narrowed", "--", "python3", "-c", py)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
	}
	got := map[string][2]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			got[f[0]] = [2]string{f[1], f[2]}
		}
	}
	eperm, noaf := fmt.Sprint(int(unix.EPERM)), fmt.Sprint(int(unix.EAFNOSUPPORT))
	tl := bermbin.Timeline(t, state, "narrowed")
	for _, tc := range []struct {
		probe, errno, syscall, field string // errno "": succeeds, no denial
	}{
		{"tiocsti", eperm, "ioctl", "spec.syscalls.denyTerminalInjection"},
		{"tioclinux", eperm, "ioctl", "spec.syscalls.denyTerminalInjection"},
		{"tiocsti-high", eperm, "ioctl", "spec.syscalls.denyTerminalInjection"},
		{"inotify_init1", eperm, "inotify_init1", "spec.syscalls.denyFileWatch"},
		{"fanotify_init", eperm, "fanotify_init", "spec.syscalls.denyFileWatch"},
		{"memfd-exec", eperm, "memfd_create", "spec.syscalls.denyExecutableMemfd"},
		{"memfd-plain", "", "memfd_create", ""},
		{"socket-ax25", noaf, "socket", "spec.network.allowNetlink"},
		{"socket-netlink", noaf, "socket", "spec.network.allowNetlink"},
		{"socketpair-inet", noaf, "socketpair", "spec.network.allowNetlink"},
		{"socket-inet", "", "socket", ""},
	} {
		res, ok := got[tc.probe]
		switch {
		case !ok:
			t.Errorf("%s: no result in %q", tc.probe, r.Stdout)
		case tc.errno == "" && res[0] == "-1":
			t.Errorf("%s: refused with errno %s", tc.probe, res[1])
		case tc.errno != "" && (res[0] != "-1" || res[1] != tc.errno):
			t.Errorf("%s: got %v, want -1 errno %s", tc.probe, res, tc.errno)
		}
	}
	named := map[string]int{}
	for _, e := range tl.Events {
		if d := e.Denial; d != nil && d.Layer == "seccomp" {
			field, _, _ := strings.Cut(d.Rule, ":")
			named[d.Object+" "+field]++
		}
	}
	for key, n := range map[string]int{
		"ioctl spec.syscalls.denyTerminalInjection": 3, "inotify_init1 spec.syscalls.denyFileWatch": 1,
		"fanotify_init spec.syscalls.denyFileWatch": 1, "memfd_create spec.syscalls.denyExecutableMemfd": 1,
		"socket spec.network.allowNetlink": 2, "socketpair spec.network.allowNetlink": 1,
	} {
		if named[key] != n {
			t.Errorf("%d seccomp denials %q, want %d (all: %v)", named[key], key, n, named)
		}
	}
}

// ioctl is traced for its refusals: in enforce mode the refused TIOCSTI is in the trail and the
// ioctls the filter lets through (or that fail on their own, ENOTTY) are not; in audit mode the
// would-be refusal succeeds, and is in the trail all the same.
func TestIoctlTracedForItsRefusals(t *testing.T) {
	bermbin.RequireRoot(t)
	py := `import ctypes, fcntl, termios
libc = ctypes.CDLL(None, use_errno=True)
f = open("/dev/null", "rb")
fd = f.fileno()
try:
    fcntl.ioctl(fd, termios.TCGETS, bytes(64))
except OSError:
    pass
print("tiocsti", libc.ioctl(fd, termios.TIOCSTI, ctypes.c_char_p(b"x")), ctypes.get_errno())
`
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) {
			state, ws := t.TempDir(), bermbin.Workspace(t)
			pol := writePolicy(t, "  mode: "+mode+"\n")
			r := run(t, state, "--call-id", "ioctl-"+mode, "--workspace", ws, "--policy", pol, "--", "python3", "-c", py)
			want := "tiocsti -1 1\n" // EPERM from the filter
			if mode == "audit" {
				want = "tiocsti -1 25\n" // allowed: /dev/null is no terminal (ENOTTY)
			}
			if r.Exit != 0 || r.Stdout != want {
				t.Fatalf("exit %d, stdout %q, want %q\n%s", r.Exit, r.Stdout, want, r.Stderr)
			}
			var tiocsti, others int
			for _, e := range bermbin.Timeline(t, state, "ioctl-"+mode).Events {
				if e.Syscall == nil || e.Syscall.Name != "ioctl" {
					continue
				}
				if e.Syscall.Args[1] == unix.TIOCSTI {
					tiocsti++
				} else {
					others++
				}
			}
			if tiocsti != 1 {
				t.Errorf("%s: %d TIOCSTI ioctls in the trail, want 1", mode, tiocsti)
			}
			if mode == "enforce" && others != 0 {
				t.Errorf("enforce: %d ioctls the filter let through are in the trail, want none", others)
			}
		})
	}
}
