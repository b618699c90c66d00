package sandboxinit

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The launcher's frames arrive whole and in order, with the files sent along, however the
// stream splits them: a warm init's prepare frame, then its call's frame with two files.
func TestChannelFrames(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[1])
	f1, _ := os.Open(os.DevNull)
	f2, _ := os.Open("/")
	defer f1.Close()
	defer f2.Close()
	big := strings.Repeat("a", 300<<10) // larger than one read and than the socket buffer
	done := make(chan error, 1)
	go func() {
		err := SendFrame(pair[0], Message{Prepare: &RootPlan{Binds: []Bind{{Path: "/usr"}}}})
		if err == nil {
			err = SendFrame(pair[0], Message{Call: &Config{Argv: []string{"/bin/true", big}}}, int(f1.Fd()), int(f2.Fd()))
		}
		unix.Close(pair[0])
		done <- err
	}()
	ch := &channel{fd: pair[1]}
	m, files, err := ch.next()
	if err != nil || m.Prepare == nil || len(m.Prepare.Binds) != 1 || m.Call != nil || len(files) != 0 {
		t.Fatalf("first frame: %+v, %d files, %v", m, len(files), err)
	}
	m, files, err = ch.next()
	if err != nil || m.Call == nil || len(m.Call.Argv) != 2 || m.Call.Argv[1] != big {
		t.Fatalf("second frame: %v", err)
	}
	if len(files) != 2 {
		t.Fatalf("got %d files with the call, want 2", len(files))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(files[1].Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("second file is not the directory sent: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, err := ch.next(); err == nil {
		t.Fatal("a closed channel gave a frame")
	}
}

// A warm init may be slower to start than its call is to come: both frames are then queued
// when it first reads, and one read returns the prepare frame with the head of the call's.
// The files still go with the call's frame.
func TestChannelFramesQueuedTogether(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[1])
	f1, _ := os.Open(os.DevNull)
	defer f1.Close()
	if err := SendFrame(pair[0], Message{Prepare: &RootPlan{Binds: []Bind{{Path: "/usr"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := SendFrame(pair[0], Message{Call: &Config{Argv: []string{"/bin/true"}}}, int(f1.Fd()), int(f1.Fd())); err != nil {
		t.Fatal(err)
	}
	unix.Close(pair[0])
	ch := &channel{fd: pair[1]}
	m, files, err := ch.next()
	if err != nil || m.Prepare == nil || len(files) != 0 {
		t.Fatalf("prepare frame: %+v, %d files, %v", m, len(files), err)
	}
	m, files, err = ch.next()
	if err != nil || m.Call == nil || len(files) != 2 {
		t.Fatalf("call frame: %+v, %d files, %v", m, len(files), err)
	}
}
