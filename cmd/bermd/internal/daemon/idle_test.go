package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
)

func listen(t *testing.T, path string, idle time.Duration) *Server {
	t.Helper()
	s := &Server{Log: slog.Default(), IdleExit: idle}
	if err := s.Listen(path); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	return s
}

// waitIdle waits (generously: this is not a speed assertion) for the server's idle exit.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	select {
	case <-s.Idle():
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not go idle")
	}
}

// An idle server does not leave while a caller holds the caller lock (it has found this
// server and is about to connect); once the lock is free it goes, its socket first.
func TestIdleExitWaitsForCallers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bermd.sock")
	caller, err := os.OpenFile(callproto.CallerLock(path), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	if err := unix.Flock(int(caller.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	s := listen(t, path, 20*time.Millisecond)
	defer s.Close()
	time.Sleep(200 * time.Millisecond) // ten idle times with the lock held
	select {
	case <-s.Idle():
		t.Fatal("the server went idle while a caller held the caller lock")
	default:
	}
	if !callproto.Available(path) {
		t.Fatal("the server stopped answering while a caller held the caller lock")
	}
	unix.Flock(int(caller.Fd()), unix.LOCK_UN)
	waitIdle(t, s)
	s.Drain()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after the idle exit: %v", err)
	}
}

// A socket a server answers on is not taken over; a server that leaves removes its own socket
// file only, never the next server's at the same path.
func TestSocketIsNeverTakenOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bermd.sock")
	a := listen(t, path, 0)
	if err := (&Server{Log: slog.Default()}).Listen(path); err == nil {
		t.Fatal("a second server took over a socket the first answers on")
	}
	// a leaves (as after an idle exit) while b starts on the same path: b's socket stays.
	a.stopListening()
	b := listen(t, path, 0)
	defer b.Close()
	a.Close()
	if !callproto.Available(path) {
		t.Fatal("the first server's Close removed the second server's socket")
	}
}

// A server whose socket directory was removed (a test's temporary directory, a cleaned /run)
// still leaves when idle: no caller can hold a lock that cannot be opened.
func TestIdleExitWithItsDirectoryGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := listen(t, filepath.Join(dir, "bermd.sock"), 20*time.Millisecond)
	defer s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
}
