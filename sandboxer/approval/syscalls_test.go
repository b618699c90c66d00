package approval

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// The supervisor's open of a name never waits, whatever is there: a FIFO nobody reads (or
// writes) is refused at once, as are a socket and a device outside the granted ones; a
// regular file, a directory and /dev/null open, with O_NONBLOCK taken off again unless the
// tool asked for it; /dev/tty (the opener's terminal, which would be bermd's) is ENXIO.
// Each refusal of a special file leaves a denial.
func TestOpenNoBlockNeverWaits(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A block device, when the machine has one (opening one may wait for its hardware).
	block := "absent"
	if devs, _ := os.ReadDir("/dev"); devs != nil {
		for _, d := range devs {
			if d.Type()&os.ModeDevice != 0 && d.Type()&os.ModeCharDevice == 0 {
				block = d.Name()
				break
			}
		}
	}
	var denials []string
	s := &Supervisor{cfg: SupervisorConfig{Emit: func(ev event.Event) {
		if ev.Denial != nil {
			denials = append(denials, ev.Denial.Rule)
		}
	}}}
	for _, tc := range []struct {
		name, dir, file string
		flags           int
		want            unix.Errno
		denied          bool
	}{
		{"a FIFO nobody reads, for writing", dir, "fifo", unix.O_WRONLY, unix.EPERM, true},
		{"a FIFO nobody writes, for reading with O_TRUNC", dir, "fifo", unix.O_RDONLY | unix.O_TRUNC, unix.EPERM, true},
		{"a FIFO, read-write", dir, "fifo", unix.O_RDWR, unix.EPERM, true},
		{"a unix socket", dir, "sock", unix.O_WRONLY, unix.EPERM, true},
		{"a regular file", dir, "file", unix.O_WRONLY | unix.O_APPEND, 0, false},
		{"a regular file the tool wants non-blocking", dir, "file", unix.O_WRONLY | unix.O_NONBLOCK, 0, false},
		{"a new file", dir, "new", unix.O_WRONLY | unix.O_CREAT, 0, false},
		{"a directory, for writing", dir, "sub", unix.O_WRONLY, unix.EISDIR, false},
		{"/dev/null", "/dev", "null", unix.O_WRONLY, 0, false},
		{"/dev/tty", "/dev", "tty", unix.O_RDWR, unix.ENXIO, false},
		{"a block device", "/dev", block, unix.O_WRONLY, unix.EPERM, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file == "absent" {
				t.Skip("no block device in /dev")
			}
			denials = nil
			d, err := unix.Open(tc.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(d)
			o := &op{n: &notif{}}
			fd, e := s.openNoBlock(o, loc{dir: d, name: tc.file, path: filepath.Join(tc.dir, tc.file)}, tc.flags, 0o644)
			if e != tc.want {
				t.Fatalf("errno %v, want %v", e, tc.want)
			}
			if (len(denials) > 0) != tc.denied {
				t.Errorf("denials %q, want one: %v", denials, tc.denied)
			}
			if e != 0 {
				return
			}
			defer unix.Close(fd)
			fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fl&unix.O_NONBLOCK != 0, tc.flags&unix.O_NONBLOCK != 0; got != want {
				t.Errorf("O_NONBLOCK on the opened file %v, want %v", got, want)
			}
		})
	}
}
