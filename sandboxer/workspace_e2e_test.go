package sandboxer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The planted path: call 1 replaces proj/ in its workspace with a symlink to another user's
// files (or into a tree the policy denies); call 2, handed WS/proj as agent frameworks do, is
// refused with a clear error instead of running there as that user.
func TestPlantedSymlinkWorkspaceRefused(t *testing.T) {
	bermbin.RequireRoot(t)
	victimHome := filepath.Join(t.TempDir(), "victim")
	// A tree the strict policy denies (/run), owned by the same user as the workspace: only
	// the deny list refuses it.
	denied, err := os.MkdirTemp("/run", "berm-test-denied-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(denied)
	for _, tc := range []struct {
		name, target string
		owner        int
		want         string
	}{
		{"another user's home", victimHome, 4242, "owned by uid 4242"},
		{"a denied tree", denied, 65534, "which the policy denies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.MkdirAll(tc.target, 0o700)
			os.Chown(tc.target, tc.owner, tc.owner)
			secret := filepath.Join(tc.target, "secret")
			os.WriteFile(secret, []byte("private\n"), 0o600)
			os.Chown(secret, tc.owner, tc.owner)

			state, ws := t.TempDir(), bermbin.Workspace(t)
			os.Mkdir(filepath.Join(ws, "proj"), 0o755)
			os.Chown(filepath.Join(ws, "proj"), 65534, 65534)
			r := run(t, state, "--call-id", "plant", "--workspace", ws, "--", "sh", "-c", "rm -rf proj && ln -s "+tc.target+" proj")
			if r.Exit != 0 {
				t.Fatalf("call 1: exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
			}
			r = run(t, state, "--call-id", "victim", "--workspace", filepath.Join(ws, "proj"), "--", "sh", "-c", "cat secret; echo pwned > secret; id")
			if r.Exit == 0 || r.Stdout != "" || !strings.Contains(r.Stderr, "symlink") || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("call 2 through the planted symlink: exit %d, want a refusal with an error naming the symlink and %q\nstdout: %s\nstderr: %s", r.Exit, tc.want, r.Stdout, r.Stderr)
			}
			if b, _ := os.ReadFile(secret); string(b) != "private\n" {
				t.Errorf("the target's file changed: %q", b)
			}
		})
	}
	// A symlink that belongs to the owner of what it leads to, outside any denied tree, is
	// followed: the call runs in the real directory.
	real := bermbin.Workspace(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	r := run(t, t.TempDir(), "--call-id", "own-link", "--workspace", link, "--", "sh", "-c", "pwd; echo ok > f")
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != real {
		t.Errorf("an owner's own symlink: exit %d, want the call in %s\n%s\n%s", r.Exit, real, r.Stdout, r.Stderr)
	}
}

// Writable is not executable where the policy grants no exec: the loader run on a workspace
// binary, LD_PRELOAD of a library in /tmp and an executable memfd all fail, each with a
// denial event of the mount layer.
func TestWritableIsNotExecutable(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	memfd := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("mfd_exec", libc.memfd_create(b"x", 0x10))
fd = os.memfd_create("y", 0)
os.write(fd, open("/usr/bin/true", "rb").read())
try:
    os.execv("/proc/self/fd/%d" % fd, ["y"])
except OSError as e:
    print("exec_memfd", e.errno)
`
	os.WriteFile(filepath.Join(ws, "memfd.py"), []byte(memfd), 0o644)
	script := `cp /usr/bin/true ./payload; chmod +x payload
/lib64/ld-linux-x86-64.so.2 ./payload; echo "loader=$?"
cp /usr/lib/x86_64-linux-gnu/libc.so.6 /tmp/evil.so
LD_PRELOAD=/tmp/evil.so /usr/bin/true 2>&1 | grep -c 'cannot be preloaded'
python3 memfd.py`
	r := run(t, state, "--call-id", "noexec", "--workspace", ws, "--", "sh", "-c", script)
	out := r.Stdout
	if strings.Contains(out, "loader=0") || !strings.Contains(out, "loader=") {
		t.Errorf("the loader ran a workspace binary:\n%s\n%s", out, r.Stderr)
	}
	if !strings.Contains(out, "\n1\n") {
		t.Errorf("LD_PRELOAD of a library in /tmp was not refused:\n%s\n%s", out, r.Stderr)
	}
	if !strings.Contains(out, "mfd_exec -1") || !strings.Contains(out, "exec_memfd 13") {
		t.Errorf("an executable memfd was allowed:\n%s\n%s", out, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "noexec")
	var mmaps, memfds, fdExecs int
	for _, e := range tl.Events {
		if e.Kind != event.KindDenial {
			continue
		}
		// The MFD_EXEC memfd is the seccomp filter's to refuse first (denyExecutableMemfd),
		// before the kernel's vm.memfd_noexec would.
		if e.Denial.Layer == event.LayerSeccomp && e.Denial.Object == "memfd_create" && strings.Contains(e.Denial.Rule, "denyExecutableMemfd") {
			memfds++
			continue
		}
		if e.Denial.Layer != event.LayerMount {
			continue
		}
		switch {
		case strings.HasPrefix(e.Denial.Object, "mmap(PROT_EXEC)") && strings.Contains(e.Denial.Rule, "noexec"):
			mmaps++
		case strings.HasPrefix(e.Denial.Object, "memfd_create(MFD_EXEC)"):
			memfds++
		case strings.HasPrefix(e.Denial.Object, "/proc/self/fd/") && strings.Contains(e.Denial.Rule, "memfd_noexec"):
			fdExecs++
		}
	}
	// The loader's and the preload's refused mappings, the MFD_EXEC memfd, the memfd's exec.
	if mmaps < 2 || memfds != 1 || fdExecs != 1 {
		t.Errorf("denials: %d refused PROT_EXEC mappings (want 2+), %d MFD_EXEC (want 1), %d fd execs (want 1): %+v", mmaps, memfds, fdExecs, denials(tl.Events))
	}
}
