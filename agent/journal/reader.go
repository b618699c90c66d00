package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/bermsec/berm/agent/event"
)

// Position is a place in the journal: a segment and a byte offset in it.
type Position struct {
	Segment uint64 `json:"segment"`
	Offset  int64  `json:"offset"`
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Segment, p.Offset) }

// Less orders positions.
func (p Position) Less(q Position) bool {
	return p.Segment < q.Segment || (p.Segment == q.Segment && p.Offset < q.Offset)
}

// Record is one record read back, with where it starts and where the next one starts.
type Record struct {
	Pos     Position
	Next    Position
	Type    RecordType
	Payload []byte // valid only during the callback
}

// Problem is something a reader skipped: a torn tail or a corrupt segment.
type Problem struct {
	Pos    Position
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("journal segment %d offset %d: %s", p.Pos.Segment, p.Pos.Offset, p.Reason)
}

// ScanResult says where a scan ended and what it skipped.
type ScanResult struct {
	End      Position  // resume here next time
	Problems []Problem // torn tails and corrupt records skipped
}

// Scan calls fn for every valid record from pos on, in order. An incomplete or corrupt record at
// the end of the newest segment stops the scan there (it may be a record being written, or a
// torn tail the next writer will cut); in an older segment the rest of that segment is skipped
// and reported. Either way, it is reported in the result's Problems, never silently.
func Scan(dir string, from Position, fn func(Record) error) (ScanResult, error) {
	res := ScanResult{End: from}
	segs, err := listSegments(dir)
	if err != nil {
		return res, err
	}
	for i, seg := range segs {
		if seg < from.Segment {
			continue
		}
		off := int64(0)
		if seg == from.Segment {
			off = from.Offset
		}
		// Only what follows off is read: a follower or a shipper polling a large segment
		// reads what was appended, not the whole file again.
		b, size, err := readSegment(dir, seg, off)
		if err != nil {
			return res, err
		}
		bad := off < 0 || off > size
		newest := i == len(segs)-1
		res.End = Position{seg, off}
		damaged := false
		if bad {
			// A resume position no scan of this segment gave (a cursor from another journal,
			// edited, or a segment replaced): nothing in it can be found from there.
			reason := fmt.Sprintf("resume offset outside the segment's %d bytes: segment skipped", size)
			res.Problems = append(res.Problems, Problem{Position{seg, off}, reason})
			damaged = true
		}
		for rel := int64(0); rel < int64(len(b)); {
			t, payload, size, perr := parseFrame(b[rel:])
			if perr != nil {
				reason := fmt.Sprintf("%v (%d bytes) skipped", perr, int64(len(b))-rel)
				res.Problems = append(res.Problems, Problem{Position{seg, off + rel}, reason})
				damaged = true
				break
			}
			rec := Record{Pos: Position{seg, off + rel}, Next: Position{seg, off + rel + int64(size)}, Type: t, Payload: payload}
			if err := fn(rec); err != nil {
				return res, err
			}
			rel += int64(size)
			res.End = rec.Next
		}
		// An older segment is finished: no writer appends to it any more, so what could not
		// be read there never will be, and the next scan starts with the following segment.
		if !newest && (damaged || res.End.Offset == off+int64(len(b))) {
			res.End = Position{segs[i+1], 0}
		}
	}
	return res, nil
}

// readSegment reads segment seg from byte off to its end (nothing for an offset outside it),
// and says the segment's size.
func readSegment(dir string, seg uint64, off int64) ([]byte, int64, error) {
	f, err := os.Open(segmentPath(dir, seg))
	if err != nil {
		return nil, 0, fmt.Errorf("read journal segment %d: %w", seg, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("read journal segment %d: %w", seg, err)
	}
	if off < 0 || off >= st.Size() {
		return nil, st.Size(), nil
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return nil, 0, fmt.Errorf("read journal segment %d from %d: %w", seg, off, err)
	}
	return b, st.Size(), nil
}

func segmentPath(dir string, seg uint64) string {
	return filepath.Join(dir, fmt.Sprintf("segment-%012d.journal", seg))
}

func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list journal %s: %w", dir, err)
	}
	var segs []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "segment-") || !strings.HasSuffix(name, ".journal") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "segment-"), ".journal"), 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, n)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i] < segs[j] })
	return segs, nil
}

// Size is the journal's total size on disk from pos on (the backlog a shipper has left).
func Size(dir string, from Position) (int64, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, seg := range segs {
		if seg < from.Segment {
			continue
		}
		st, err := os.Stat(segmentPath(dir, seg))
		if err != nil {
			continue
		}
		total += st.Size()
		if seg == from.Segment {
			total -= from.Offset
		}
	}
	return total, nil
}

// DecodeCallStart, DecodeEvents and DecodeCallEnd decode a record's payload.
func DecodeCallStart(p []byte) (*event.CallStart, error) {
	var s event.CallStart
	if err := json.Unmarshal(p, &s); err != nil {
		return nil, fmt.Errorf("decode call_start: %w", err)
	}
	return &s, nil
}

func DecodeEvents(p []byte) ([]event.Event, error) {
	var evs []event.Event
	if err := json.Unmarshal(p, &evs); err != nil {
		return nil, fmt.Errorf("decode events: %w", err)
	}
	return evs, nil
}

func DecodeCallEnd(p []byte) (*event.CallRecord, error) {
	var r event.CallRecord
	if err := json.Unmarshal(p, &r); err != nil {
		return nil, fmt.Errorf("decode call_end: %w", err)
	}
	return &r, nil
}
