package journal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/testutil"
)

func TestPruneBySizeAndAge(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour)
	cases := []struct {
		name string
		r    Retention
		want []uint64 // segments left
	}{
		{"no bounds", Retention{}, []uint64{1, 2, 3, 4}},
		{"size keeps the newest that fit", Retention{MaxBytes: 250}, []uint64{3, 4}},
		{"age drops the old ones", Retention{MaxAge: 24 * time.Hour}, []uint64{3, 4}},
		{"the open segment stays whatever its size", Retention{MaxBytes: 1}, []uint64{4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := OpenWriter(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			for seg := uint64(1); seg <= 4; seg++ {
				p := segmentPath(dir, seg)
				if err := os.WriteFile(p, make([]byte, 100), 0o600); err != nil {
					t.Fatal(err)
				}
				if seg <= 2 {
					os.Chtimes(p, old, old)
				}
			}
			if _, err := w.Prune(tc.r); err != nil {
				t.Fatal(err)
			}
			got, _ := listSegments(dir)
			if len(got) != len(tc.want) {
				t.Fatalf("segments left %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("segments left %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// A journal on a file system the tool fills (its workspace on the same one): the records
// being written still land, on the reserve given up for them, and new calls are refused with
// a reason until there is room again.
func TestFullDiskKeepsRecordsAndRefusesCalls(t *testing.T) {
	testutil.RequireRoot(t, "mounting a small tmpfs to fill")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	old := ReserveBytes
	ReserveBytes = 2 << 20
	defer func() { ReserveBytes = old }()
	w, err := OpenWriter(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Room(); err != nil {
		t.Fatalf("room on an empty file system: %v", err)
	}
	// The tool fills the disk.
	f, _ := os.Create(filepath.Join(dir, "fill"))
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	rec := &event.CallRecord{CallStart: event.CallStart{CallID: "filled", CallKey: "k"}, EndReason: event.EndExit, Complete: true}
	if err := w.AppendCallEnd(rec); err != nil {
		t.Fatalf("the call's record was lost to the full disk: %v", err)
	}
	if w.Released() != 1 {
		t.Errorf("reserve released %d times, want 1", w.Released())
	}
	err = w.Room()
	if err == nil || !strings.Contains(err.Error(), "refusing to start calls") {
		t.Fatalf("a new call on the full disk: %v; want a refusal that says why", err)
	}
	os.Remove(filepath.Join(dir, "fill"))
	if err := w.Room(); err != nil {
		t.Fatalf("room again once the disk has space: %v", err)
	}
	var got []string
	Scan(w.Dir(), Position{}, func(r Record) error {
		if r.Type == TypeCallEnd {
			c, _ := DecodeCallEnd(r.Payload)
			got = append(got, c.CallID)
		}
		return nil
	})
	if len(got) != 1 || got[0] != "filled" {
		t.Fatalf("records in the journal: %v", got)
	}
}
