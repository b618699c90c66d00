package slowfs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/slowfs"
)

// A held lookup keeps its caller waiting until the release; the mount point stays
// stat-able meanwhile.
func TestAHeldLookupWaitsForTheRelease(t *testing.T) {
	f := slowfs.Mount(t, t.TempDir())
	if err := os.WriteFile(filepath.Join(f.Dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Hold(slowfs.Lookup, slowfs.Getattr)
	done := make(chan error, 1)
	go func() { _, err := os.Stat(filepath.Join(f.Dir, "x")); done <- err }()
	w, err := f.WaitHeld(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w[0].Op != slowfs.Lookup || w[0].Name != "x" || w[0].TGID != uint32(os.Getpid()) {
		t.Errorf("held %v, want this process's lookup of x", w)
	}
	if _, err := os.Stat(f.Dir); err != nil {
		t.Errorf("the mount point: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("the stat ended while held: %v", err)
	default:
	}
	f.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
