package sandboxinit

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/seccomp"
)

// The filter, installed for real in a child process: every way of giving a file a setuid or
// setgid bit fails with EPERM, openat2 with ENOSYS, and the same calls without those bits work.
func TestSetIDFilter(t *testing.T) {
	if os.Getenv("BERM_SETID_CHILD") != "" {
		setIDChild()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSetIDFilter$")
	cmd.Env = append(os.Environ(), "BERM_SETID_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{
		"chmod 4755: operation not permitted", "chmod 2755: operation not permitted", "chmod 755: ok",
		"fchmodat 6755: operation not permitted", "openat O_CREAT 4755: operation not permitted",
		"openat O_CREAT 644: ok", "openat plain mode-bits garbage: ok", "mkdir 2755: operation not permitted",
		"mkdir 755: ok", "mknod fifo 4644: operation not permitted", "openat2: function not implemented",
	} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "f")); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("f: %v %v", st.Mode(), err)
	}
}

func setIDChild() {
	runtime.LockOSThread()
	dir := os.Getenv("BERM_SETID_CHILD")
	if err := seccomp.Install(setIDFilter(), seccomp.NoTSync); err != nil {
		println("install:", err.Error())
		os.Exit(1)
	}
	res := func(name string, err error) {
		msg := "ok"
		if err != nil {
			msg = err.Error()
		}
		os.Stdout.WriteString(name + ": " + msg + "\n")
	}
	f := filepath.Join(dir, "f")
	fd, err := unix.Open(f, unix.O_CREAT|unix.O_WRONLY, 0o644)
	unix.Close(fd)
	res("openat O_CREAT 644", err)
	res("chmod 4755", unix.Chmod(f, 0o4755))
	res("chmod 2755", unix.Chmod(f, 0o2755))
	res("chmod 755", unix.Chmod(f, 0o755))
	res("fchmodat 6755", unix.Fchmodat(unix.AT_FDCWD, f, 0o6755, 0))
	_, err = unix.Open(filepath.Join(dir, "g"), unix.O_CREAT|unix.O_WRONLY, 0o4755)
	res("openat O_CREAT 4755", err)
	fd, err = unix.Open(f, unix.O_RDONLY, 0o4755)
	unix.Close(fd)
	res("openat plain mode-bits garbage", err)
	res("mkdir 2755", unix.Mkdir(filepath.Join(dir, "d"), 0o2755))
	res("mkdir 755", unix.Mkdir(filepath.Join(dir, "e"), 0o755))
	res("mknod fifo 4644", unix.Mknod(filepath.Join(dir, "p"), unix.S_IFIFO|0o4644, 0))
	_, err = unix.Openat2(unix.AT_FDCWD, f, &unix.OpenHow{Flags: unix.O_RDONLY})
	res("openat2", err)
	os.Exit(0)
}
