package sandboxer

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

// The cached mount table is the kernel's table at every step: each kind of change is seen (the
// table is read again), and with no change it is not read again. In a mount namespace of the
// test's own thread, so that mounts made elsewhere on the machine neither show nor count.
func TestMountTableFollowsEveryChange(t *testing.T) {
	testutil.RequireRoot(t, "mounts in a mount namespace of the test's own")
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread ends with the goroutine (never unlocked): its namespace is not reused.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Errorf("make mounts private: %v", err)
			return
		}
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		for _, d := range []string{a, b} {
			if err := unix.Mkdir(d, 0o755); err != nil {
				t.Errorf("mkdir: %v", err)
				return
			}
		}
		m := &mountTable{path: "/proc/thread-self/mountinfo"}
		defer m.close()
		if _, err := m.current(); err != nil {
			t.Errorf("first read: %v", err)
			return
		}
		steps := []struct {
			name   string
			change func() error
			// show is a line fragment the table must hold after the step; hide, one it must not.
			show, hide string
		}{
			{"no change", func() error { return nil }, "", ""},
			{"mount", func() error { return unix.Mount("berm-mt", a, "tmpfs", 0, "size=4k") }, " " + a + " ", ""},
			{"no change again", func() error { return nil }, " " + a + " ", ""},
			{"remount read-only", func() error { return unix.Mount("", a, "", unix.MS_REMOUNT|unix.MS_RDONLY, "size=4k") }, " " + a + " ro,", ""},
			{"bind", func() error { return unix.Mount(a, b, "", unix.MS_BIND, "") }, " " + b + " ", ""},
			{"unmount", func() error { return unix.Unmount(b, 0) }, "", " " + b + " "},
			{"detach", func() error { return unix.Unmount(a, unix.MNT_DETACH) }, "", " " + a + " "},
		}
		for _, st := range steps {
			before := m.reads
			if err := st.change(); err != nil {
				t.Errorf("%s: %v", st.name, err)
				return
			}
			text, err := m.current()
			if err != nil {
				t.Errorf("%s: %v", st.name, err)
				return
			}
			changed := !strings.HasPrefix(st.name, "no change")
			if got := m.reads - before; changed && got != 1 || !changed && got != 0 {
				t.Errorf("%s: the table was read %d times, want %d", st.name, got, map[bool]int{true: 1}[changed])
			}
			if st.show != "" && !strings.Contains(text, st.show) {
				t.Errorf("%s: the table lacks %q:\n%s", st.name, st.show, text)
			}
			if st.hide != "" && strings.Contains(text, st.hide) {
				t.Errorf("%s: the table still has %q:\n%s", st.name, st.hide, text)
			}
		}
	}()
	<-done
}
