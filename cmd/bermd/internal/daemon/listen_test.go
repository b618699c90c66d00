package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// umask is the process's umask as /proc shows it (reading it with umask(2) would change it).
func umask(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Skip("/proc/self/status shows no Umask")
	return ""
}

// Listen never changes the process's umask, not even for a moment: bermd forks sandbox inits
// from other goroutines meanwhile, and an init forked with umask 077 made the call's
// directories unreachable for its tool (setup_failed, "permission denied", on the first
// calls of a bermd just started). The socket is root-only all the same.
func TestListenLeavesTheUmaskAlone(t *testing.T) {
	want := umask(t)
	var stop, seen atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if umask(t) != want {
				seen.Store(true)
			}
		}
	}()
	dir := t.TempDir()
	for i := 0; i < 300 && !seen.Load(); i++ {
		s := &Server{Log: slog.Default()}
		path := filepath.Join(dir, "bermd.sock")
		if err := s.Listen(path); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("socket mode %v, want 0600", st.Mode().Perm())
		}
		s.Close()
	}
	stop.Store(true)
	<-done
	if seen.Load() {
		t.Fatalf("the process's umask changed (from %s) while Listen ran", want)
	}
}
