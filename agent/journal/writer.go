package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// SegmentBytes is the size past which the writer starts a new segment.
var SegmentBytes int64 = 64 << 20

// Writer appends records. Several processes may write one journal at once (every embedded
// `berm run` and bermd): each append holds an exclusive flock on the journal's lock file and
// goes out in a single write(2).
type Writer struct {
	dir  string
	lock *os.File

	mu    sync.Mutex
	seg   uint64   // segment currently open
	f     *os.File // open segment, O_APPEND
	known int64    // offset up to which the segment is known to be valid
	buf   []byte
	dirty bool // a record that asked for durability is not synced yet

	stop chan struct{}
	done chan struct{}

	released atomic.Int64 // times the reserve was given up for a record (the disk was full)
}

// SyncInterval is the group commit period: a call's end record is on disk at most this long
// after it was appended, and many calls ending together share one fsync.
var SyncInterval = 100 * time.Millisecond

// OpenWriter opens (creating) the journal in dir.
func OpenWriter(dir string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create journal dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "journal.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal lock: %w", err)
	}
	w := &Writer{dir: dir, lock: lock, stop: make(chan struct{}), done: make(chan struct{})}
	_ = w.reserve() // no room for it: Room says so and refuses calls
	go w.syncLoop()
	return w, nil
}

func (w *Writer) syncLoop() {
	defer close(w.done)
	t := time.NewTicker(SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.syncOnce()
		}
	}
}

// syncOnce syncs the open segment when a record asked for it. The fsync runs on a duplicate
// of the segment's descriptor, outside w.mu: appends (a call's start and end records, on every
// launch's path) do not wait for the disk. What was appended before dirty was cleared is
// written and goes with this fsync; what is appended after sets dirty again for the next.
func (w *Writer) syncOnce() {
	w.mu.Lock()
	if !w.dirty || w.f == nil {
		w.mu.Unlock()
		return
	}
	fd, err := unix.FcntlInt(w.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		// no descriptor to spare: sync under the lock, as before
		_ = w.f.Sync()
		w.dirty = false
		w.mu.Unlock()
		return
	}
	w.dirty = false
	w.mu.Unlock()
	if err := unix.Fsync(fd); err != nil {
		w.mu.Lock()
		w.dirty = true // try again at the next tick
		w.mu.Unlock()
	}
	unix.Close(fd)
}

// Dir is the journal's directory.
func (w *Writer) Dir() string { return w.dir }

// AppendCallStart, AppendEvents and AppendCallEnd write one record each. AppendCallEnd's
// record is synced by the next group commit (SyncInterval) or Close: a finished call's record
// survives a power loss once that has happened.
func (w *Writer) AppendCallStart(s *event.CallStart) error {
	return w.appendJSON(TypeCallStart, s, false)
}

func (w *Writer) AppendEvents(evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return w.appendJSON(TypeEvents, evs, false)
}

func (w *Writer) AppendCallEnd(r *event.CallRecord) error { return w.appendJSON(TypeCallEnd, r, true) }

func (w *Writer) appendJSON(t RecordType, v any, sync bool) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", t, err)
	}
	return w.Append(t, payload, sync)
}

// Append writes one raw record.
func (w *Writer) Append(t RecordType, payload []byte, sync bool) error {
	if len(payload)+1 > MaxRecord {
		return fmt.Errorf("append %s: record of %d bytes exceeds %d", t, len(payload), MaxRecord)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := unix.Flock(int(w.lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock journal: %w", err)
	}
	defer unix.Flock(int(w.lock.Fd()), unix.LOCK_UN)

	if err := w.prepareLocked(); err != nil {
		return err
	}
	w.buf = appendFrame(w.buf[:0], t, payload)
	n, err := w.f.Write(w.buf)
	if err != nil && isNoSpace(err) && w.release() {
		// The file system is full: the reserve goes, and the record with it lands.
		if n > 0 {
			_ = w.f.Truncate(w.known)
		}
		n, err = w.f.Write(w.buf)
	}
	if err != nil {
		// A short write leaves a torn tail; cut it now rather than leave it to the next writer.
		if n > 0 {
			_ = w.f.Truncate(w.known)
		}
		return fmt.Errorf("append %s to %s: %w", t, w.f.Name(), err)
	}
	w.known += int64(n)
	w.dirty = w.dirty || sync
	return nil
}

// prepareLocked makes sure the open segment is the newest one, that whatever other writers
// appended since we last looked is valid, and that a torn tail left by a writer that died is
// cut off before we append after it.
func (w *Writer) prepareLocked() error {
	segs, err := listSegments(w.dir)
	if err != nil {
		return err
	}
	last := uint64(1)
	if len(segs) > 0 {
		last = segs[len(segs)-1]
	}
	if w.f == nil || w.seg != last {
		if w.f != nil {
			if w.dirty {
				_ = w.f.Sync()
				w.dirty = false
			}
			w.f.Close()
		}
		if err := w.openSegment(last, 0); err != nil {
			return err
		}
	}
	st, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", w.f.Name(), err)
	}
	if st.Size() != w.known {
		valid, err := validEnd(w.f, w.known, st.Size())
		if err != nil {
			return err
		}
		if valid != st.Size() {
			if err := w.f.Truncate(valid); err != nil {
				return fmt.Errorf("cut torn tail of %s at %d: %w", w.f.Name(), valid, err)
			}
		}
		w.known = valid
	}
	if w.known >= SegmentBytes {
		_ = w.f.Sync()
		w.f.Close()
		w.f = nil
		return w.openSegment(w.seg+1, 0)
	}
	return nil
}

func (w *Writer) openSegment(seg uint64, known int64) error {
	f, err := os.OpenFile(segmentPath(w.dir, seg), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open journal segment: %w", err)
	}
	w.f, w.seg, w.known = f, seg, known
	return nil
}

// validEnd scans the records between from and to and returns the end of the last valid one.
func validEnd(f *os.File, from, to int64) (int64, error) {
	r, err := os.Open(f.Name())
	if err != nil {
		return 0, fmt.Errorf("reopen %s: %w", f.Name(), err)
	}
	defer r.Close()
	b := make([]byte, to-from)
	if _, err := r.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	off := 0
	for off < len(b) {
		_, _, size, err := parseFrame(b[off:])
		if err != nil {
			break
		}
		off += size
	}
	return from + int64(off), nil
}

// Close releases the writer's files.
func (w *Writer) Close() error {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	if w.f != nil {
		errs = append(errs, w.f.Sync(), w.f.Close())
		w.f = nil
	}
	errs = append(errs, w.lock.Close())
	return errors.Join(errs...)
}

// Released is how many times the journal gave up its reserve to write a record.
func (w *Writer) Released() int64 { return w.released.Load() }
