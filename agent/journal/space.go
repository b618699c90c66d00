package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ReserveBytes is the space the journal holds in reserve on its file system (a file of that
// size, allocated ahead). When the file system fills (a call wrote its workspace full, on the
// same file system), the reserve is given up so that the records being written still land;
// calls are then refused until there is room again (Writer.Room).
var ReserveBytes int64 = 64 << 20

const reserveName = "journal.reserve"

// Retention bounds the journal: the oldest segments go once the journal is larger than
// MaxBytes or a segment is older than MaxAge (0: no bound). The segment being written is kept.
type Retention struct {
	MaxBytes int64
	MaxAge   time.Duration
}

// DefaultRetention keeps 8 GiB or 30 days of journal, whichever is less.
var DefaultRetention = Retention{MaxBytes: 8 << 30, MaxAge: 30 * 24 * time.Hour}

// reserve makes sure the reserve file exists with its full size. A file system without the
// room for it says so: the journal runs, and Room refuses calls.
func (w *Writer) reserve() error {
	p := filepath.Join(w.dir, reserveName)
	if st, err := os.Stat(p); err == nil && st.Size() >= ReserveBytes {
		return nil
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("journal reserve: %w", err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, ReserveBytes); err != nil {
		_ = os.Remove(p)
		return fmt.Errorf("journal reserve of %d bytes on %s: %w", ReserveBytes, w.dir, err)
	}
	return nil
}

// release gives up the reserve (the file system is full): the record at hand can be written.
func (w *Writer) release() bool {
	err := os.Remove(filepath.Join(w.dir, reserveName))
	if err == nil {
		w.released.Add(1)
	}
	return err == nil
}

func isNoSpace(err error) bool { return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) }

// Room says whether the journal can take a new call: its reserve is in place (made again if
// the file system has room for it), so that the call's records cannot be lost to a full disk.
func (w *Writer) Room() error {
	// The reserve in place (the usual case) is one stat, without the writer's lock: every
	// call's start asks, and the lock is the appends' (each call's events and records).
	if st, err := os.Stat(filepath.Join(w.dir, reserveName)); err == nil && st.Size() >= ReserveBytes {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.reserve(); err != nil {
		var st unix.Statfs_t
		free := "?"
		if unix.Statfs(w.dir, &st) == nil {
			free = fmt.Sprintf("%d MiB", int64(st.Bavail)*st.Bsize>>20)
		}
		return fmt.Errorf("the journal's file system has %s free, less than the %d MiB berm keeps in reserve so that no call's records are lost: refusing to start calls until there is room (put --state-dir on a file system of its own): %w",
			free, ReserveBytes>>20, err)
	}
	return nil
}

// Prune deletes the oldest segments past the retention bounds and returns how many bytes it
// freed. The open segment is never deleted.
func (w *Writer) Prune(r Retention) (int64, error) {
	segs, err := listSegments(w.dir)
	if err != nil || len(segs) < 2 {
		return 0, err
	}
	type seg struct {
		n    uint64
		size int64
		mod  time.Time
	}
	var all []seg
	var total int64
	for _, n := range segs {
		st, err := os.Stat(segmentPath(w.dir, n))
		if err != nil {
			continue
		}
		all = append(all, seg{n, st.Size(), st.ModTime()})
		total += st.Size()
	}
	var freed int64
	now := time.Now()
	for _, s := range all[:len(all)-1] { // never the newest
		over := r.MaxBytes > 0 && total > r.MaxBytes
		old := r.MaxAge > 0 && now.Sub(s.mod) > r.MaxAge
		if !over && !old {
			break
		}
		if err := os.Remove(segmentPath(w.dir, s.n)); err != nil {
			return freed, fmt.Errorf("journal retention: %w", err)
		}
		total -= s.size
		freed += s.size
	}
	return freed, nil
}
