package policy

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// A path missing from the call's root is a denial when it withholds something: a write, or a
// read of what the host has there. A read of what exists nowhere (~/.curlrc of a user without
// one) and a runtime's probe of the machine's shape (/sys) are the program's normal path.
func TestJudgeRootProbesAreNotDenials(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	p, err := Parse("p.yaml", []byte(header+"spec:\n  mode: enforce\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(env)
	if err != nil {
		t.Fatal(err)
	}
	j := &Judge{Compiled: c, Workspace: env.Workspace, Roots: []string{"/usr", "/etc"}}
	enoent := -int64(unix.ENOENT)
	for _, tc := range []struct {
		name   string
		path   string
		flags  uint32
		denial bool
	}{
		{"a dotfile that exists nowhere", "/home/berm-no-such-user/.curlrc", unix.O_RDONLY, false},
		{"a host file outside the root", "/sys/kernel/notes", unix.O_RDONLY, true},
		{"a host directory outside the root", "/sys/kernel", unix.O_RDONLY | unix.O_DIRECTORY, true},
		{"a write where nothing exists", "/home/berm-no-such-user/.bashrc", unix.O_WRONLY | unix.O_CREAT, true},
		{"cgroup memory limit", "/sys/fs/cgroup/memory/memory.limit_in_bytes", unix.O_RDONLY, false},
		{"cpu frequency", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", unix.O_RDONLY, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := event.Event{Kind: event.KindOpen, Open: &event.Open{Path: tc.path, Flags: tc.flags, Result: enoent, Dirfd: unix.AT_FDCWD}}
			d := j.Denial(&ev)
			if (d != nil) != tc.denial {
				t.Fatalf("denial %+v, want one: %v", d, tc.denial)
			}
			if d != nil && d.Rule != "not in the call's root" {
				t.Errorf("rule %q", d.Rule)
			}
		})
	}
}

// Past the call's budget of host look-ups (a tool flooding made-up paths), a read of a path
// missing from the root is judged by its string, and its denial says so: berm does not claim
// the host has what it did not look up.
func TestJudgePastTheBudgetSaysItJudgedByName(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	p, err := Parse("p.yaml", []byte(header+"spec:\n  mode: enforce\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(env)
	if err != nil {
		t.Fatal(err)
	}
	j := &Judge{Compiled: c, Workspace: env.Workspace, Roots: []string{"/usr", "/etc"}}
	j.resolved.spent = resolveBudget
	ev := event.Event{Kind: event.KindOpen, Open: &event.Open{Path: "/home/berm-no-such-user/.curlrc", Flags: unix.O_RDONLY, Result: -int64(unix.ENOENT), Dirfd: unix.AT_FDCWD}}
	d := j.Denial(&ev)
	if want := "not in the call's root (" + notLookedUp + ")"; d == nil || d.Rule != want {
		t.Errorf("denial %+v, want rule %q", d, want)
	}
}
