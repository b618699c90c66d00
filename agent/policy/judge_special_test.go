package policy

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/landlock"
)

// Writable trees grant no special file unless the policy allows them: FIFOs and sockets with
// allowSpecialFiles, device nodes never.
func TestWritableTreesGrantSpecialFilesOnlyWhenAllowed(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	for _, tc := range []struct {
		spec      string
		fifo, dev bool
	}{{"  mode: enforce\n", false, false}, {"  filesystem: {allowSpecialFiles: true}\n", true, false}} {
		p, err := Parse("p.yaml", []byte(header+"spec:\n"+tc.spec))
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Compile(env)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{env.Workspace + "/x", env.Workspace} {
			a := c.FSAccess(path)
			if got := a&(landlock.MakeFifo|landlock.MakeSock) == landlock.MakeFifo|landlock.MakeSock; got != tc.fifo {
				t.Errorf("%q %s: make_fifo and make_sock granted %v, want %v", tc.spec, path, got, tc.fifo)
			}
			if got := a&(landlock.MakeChar|landlock.MakeBlock) != 0; got != tc.dev {
				t.Errorf("%q %s: device nodes granted %v", tc.spec, path, got)
			}
			if a&landlock.MakeReg == 0 {
				t.Errorf("%q %s: no make_reg", tc.spec, path)
			}
		}
		if c.Landlock.HandledFS&(landlock.MakeFifo|landlock.MakeSock|landlock.MakeChar|landlock.MakeBlock) == 0 {
			t.Errorf("%q: special files not handled by the ruleset", tc.spec)
		}
	}
}

// The judge names the refusals that replace the walk after a call: special files by their
// Landlock right, set-id modes and openat2 by the launcher's set-id filter.
func TestJudgeNamesSpecialFileAndSetidRefusals(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	compile := func(spec string) *Judge { return compileJudge(t, env, spec) }
	strict := compile("  mode: enforce\n")
	allow := compile("  filesystem: {allowSpecialFiles: true}\n")
	eacces, eperm := -int64(unix.EACCES), -int64(unix.EPERM)
	sc := func(name string, args [6]uint64, path string, result int64) *event.Event {
		nr, _ := event.SyscallNumber(name)
		return &event.Event{Syscall: &event.Syscall{Nr: nr, Name: name, Args: args, Path: path, Result: result}}
	}
	open := func(path string, flags, mode uint32, result int64) *event.Event {
		return &event.Event{Open: &event.Open{Path: path, Dirfd: unix.AT_FDCWD, Flags: flags, Mode: mode, Result: result}}
	}
	for _, tc := range []struct {
		name  string
		j     *Judge
		ev    *event.Event
		layer string // "" = no denial
		rule  string
	}{
		{"mkfifo", strict, sc("mknodat", [6]uint64{uint64(0xffffff9c), 0, unix.S_IFIFO | 0o644}, "fifo", eacces), event.LayerLandlock, "make_fifo"},
		{"mknod fifo", strict, sc("mknod", [6]uint64{0, unix.S_IFIFO | 0o644}, "fifo", eacces), event.LayerLandlock, "make_fifo"},
		{"mknod socket", strict, sc("mknod", [6]uint64{0, unix.S_IFSOCK | 0o644}, "s", eacces), event.LayerLandlock, "make_sock"},
		{"mknod char", strict, sc("mknod", [6]uint64{0, unix.S_IFCHR | 0o644, 0x103}, "null", eacces), event.LayerLandlock, "no device nodes"},
		{"mknod char, allowed specials", allow, sc("mknod", [6]uint64{0, unix.S_IFCHR | 0o644, 0x103}, "null", eacces), event.LayerLandlock, "no device nodes"},
		{"mkfifo allowed", allow, sc("mknod", [6]uint64{0, unix.S_IFIFO | 0o644}, "fifo", 0), "", ""},
		{"mknod regular", strict, sc("mknod", [6]uint64{0, unix.S_IFREG | 0o644}, "f", 0), "", ""},
		{"bind refused", strict, sc("bind", [6]uint64{3}, "", eacces), event.LayerLandlock, "make_sock"},
		{"bind allowed specials", allow, sc("bind", [6]uint64{3}, "", eacces), "", ""},
		{"bind worked", strict, sc("bind", [6]uint64{3}, "", 0), "", ""},
		{"mknod setuid", strict, sc("mknod", [6]uint64{0, unix.S_IFREG | 0o4755}, "f", eperm), event.LayerSeccomp, ruleSetID},
		{"mkdir setgid", strict, sc("mkdir", [6]uint64{0, 0o2755}, "d", eperm), event.LayerSeccomp, ruleSetID},
		{"mkdir", strict, sc("mkdir", [6]uint64{0, 0o755}, "d", 0), "", ""},
		{"open creating setuid", strict, open("f", unix.O_CREAT|unix.O_WRONLY, 0o4755, eperm), event.LayerSeccomp, ruleSetID},
		{"open O_TMPFILE setgid", strict, open(".", unix.O_TMPFILE|unix.O_WRONLY, 0o2755, eperm), event.LayerSeccomp, ruleSetID},
		{"open without O_CREAT", strict, open("f", unix.O_RDONLY, 0o4755, eperm), "", ""},
		{"openat2", strict, open("f", unix.O_CREAT, 0o644, -int64(unix.ENOSYS)), event.LayerSeccomp, "openat2 fails with ENOSYS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.j.Denial(tc.ev)
			switch {
			case tc.layer == "" && d != nil:
				t.Errorf("denial %+v, want none", d)
			case tc.layer != "" && d == nil:
				t.Errorf("no denial, want %s %q", tc.layer, tc.rule)
			case d != nil && (d.Layer != tc.layer || !strings.Contains(d.Rule, tc.rule)):
				t.Errorf("denial %s %q, want %s %q", d.Layer, d.Rule, tc.layer, tc.rule)
			}
		})
	}
}
