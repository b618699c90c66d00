package journal

import (
	"bytes"
	"os"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

// FuzzScan: a journal torn or written by a hostile hand (two segments of arbitrary bytes, a
// resume position from a cursor file) never panics the reader or makes it loop: every record
// it delivers is one valid frame (appendFrame makes the same bytes), in order, inside its
// segment; what it cannot read it reports as a Problem at that place, never silently; and a
// scan from where the last ended delivers nothing twice.
func FuzzScan(f *testing.F) {
	for _, s := range scanSeeds() {
		f.Add(s.a, s.b, s.seg, s.off)
	}
	f.Fuzz(func(t *testing.T, a, b []byte, fromSeg uint8, fromOff int64) {
		dir := t.TempDir()
		segs := map[uint64][]byte{1: a, 2: b}
		for seg, data := range segs {
			if err := os.WriteFile(segmentPath(dir, seg), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		from := Position{uint64(fromSeg % 4), fromOff}
		var got []Record
		res, err := Scan(dir, from, func(r Record) error {
			r.Payload = bytes.Clone(r.Payload)
			got = append(got, r)
			return nil
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		checkScan(t, segs, from, got, res)

		// Resuming where it ended delivers nothing already delivered.
		res2, err := Scan(dir, res.End, func(r Record) error {
			for _, g := range got {
				if g.Pos == r.Pos {
					t.Fatalf("record at %v delivered again by the scan resumed at %v", r.Pos, res.End)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("resumed scan: %v", err)
		}
		if res2.End.Less(res.End) {
			t.Fatalf("resumed scan at %v ended before it, at %v", res.End, res2.End)
		}
	})
}

// checkScan is the reader's contract over the segments it read.
func checkScan(t *testing.T, segs map[uint64][]byte, from Position, got []Record, res ScanResult) {
	t.Helper()
	for i, r := range got {
		data := segs[r.Pos.Segment]
		if r.Pos.Segment != r.Next.Segment || r.Pos.Offset < 0 || r.Next.Offset <= r.Pos.Offset || r.Next.Offset > int64(len(data)) {
			t.Fatalf("record %d spans %v to %v, outside its segment of %d bytes", i, r.Pos, r.Next, len(data))
		}
		if r.Pos.Less(from) {
			t.Fatalf("record at %v, before the scan's start %v", r.Pos, from)
		}
		if frame := appendFrame(nil, r.Type, r.Payload); !bytes.Equal(frame, data[r.Pos.Offset:r.Next.Offset]) {
			t.Fatalf("record at %v is not the frame of its bytes", r.Pos)
		}
		if i > 0 && !got[i-1].Pos.Less(r.Pos) {
			t.Fatalf("record at %v after %v: out of order", r.Pos, got[i-1].Pos)
		}
		// Within a segment, records follow each other: nothing between them is skipped
		// without a Problem (a scan stops at its first problem in a segment).
		if i > 0 && got[i-1].Next.Segment == r.Pos.Segment && got[i-1].Next != r.Pos {
			t.Fatalf("bytes from %v to %v skipped", got[i-1].Next, r.Pos)
		}
	}
	// Every segment read from a place that is not its end either reached its end or says why.
	for seg := uint64(1); seg <= 2; seg++ {
		if seg < from.Segment {
			continue
		}
		start := int64(0)
		if seg == from.Segment {
			start = from.Offset
		}
		end := start
		for _, r := range got {
			if r.Pos.Segment == seg {
				end = r.Next.Offset
			}
		}
		if end == int64(len(segs[seg])) {
			continue
		}
		reported := false
		for _, p := range res.Problems {
			reported = reported || p.Pos.Segment == seg
			if p.Reason == "" {
				t.Fatalf("problem at %v without a reason", p.Pos)
			}
		}
		if !reported {
			t.Fatalf("segment %d of %d bytes read from %d to %d, and no problem reported (%v)", seg, len(segs[seg]), start, end, res.Problems)
		}
	}
	// The end is a place a scan can resume from: inside a segment that exists, at most its end.
	if res.End.Segment != 0 || len(got) > 0 {
		if data, ok := segs[res.End.Segment]; ok && (res.End.Offset < 0 || res.End.Offset > int64(len(data))) && len(res.Problems) == 0 {
			t.Fatalf("scan ends at %v, outside a segment of %d bytes, and reports no problem", res.End, len(data))
		}
	}
}

type scanSeed struct {
	a, b []byte
	seg  uint8
	off  int64
}

// scanSeeds are two segments and a resume position: valid, torn, corrupt, and positions no
// scan gave (the last three made Scan panic or never leave the segment before it was fixed).
func scanSeeds() []scanSeed {
	rec := func(t RecordType, p string) []byte { return appendFrame(nil, t, []byte(p)) }
	one := rec(TypeCallStart, `{"call_id":"a"}`)
	two := append(rec(TypeEvents, `[{"kind":"exec"}]`), rec(TypeCallEnd, `{"call_id":"a"}`)...)
	flip := bytes.Clone(two)
	flip[12] ^= 1
	huge := bytes.Clone(one)
	huge[3] = 0xff // a length past MaxRecord
	zero := bytes.Clone(one)
	copy(zero, []byte{0, 0, 0, 0})
	badType := appendFrame(nil, 9, []byte("x"))
	return []scanSeed{
		{one, two, 0, 0},
		{append(bytes.Clone(one), two[:11]...), nil, 0, 0}, // torn tail, only segment
		{append(bytes.Clone(one), two[:11]...), two, 1, 0}, // torn tail of an older segment
		{flip, one, 0, 0},
		{huge, zero, 0, 0},
		{badType, one, 0, 0},
		{one, two, 1, int64(len(one))},
		{one, two, 1, int64(len(one)) + 1000}, // a cursor past the segment's end
		{one, two, 1, -5},                     // a cursor before its start
		{one, two, 2, int64(len(two)) + 1},    // past the newest segment's end
		{one, two, 1, 3},                      // inside a record
		{nil, nil, 0, 0},
		{make([]byte, headerSize), nil, 0, 0},
	}
}

// FuzzAppendAfterTornTail: a writer opened over a newest segment of any bytes cuts what is
// not valid and appends after the rest; the segment then reads to its end, the new record
// last.
func FuzzAppendAfterTornTail(f *testing.F) {
	for _, s := range scanSeeds() {
		f.Add(s.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(segmentPath(dir, 2), b, 0o600); err != nil {
			t.Fatal(err)
		}
		var before []Record
		if _, err := Scan(dir, Position{}, func(r Record) error {
			r.Payload = bytes.Clone(r.Payload)
			before = append(before, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The writer cuts the newest segment's torn tail and appends after what is valid.
		defer func(n int64) { ReserveBytes = n }(ReserveBytes)
		ReserveBytes = 4096
		w, err := OpenWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(TypeCallEnd, []byte(`{"fuzz":1}`), false); err != nil {
			t.Fatalf("append after hostile bytes: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var after []Record
		res, err := Scan(dir, Position{}, func(r Record) error {
			r.Payload = bytes.Clone(r.Payload)
			after = append(after, r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Problems) != 0 || len(after) != len(before)+1 {
			t.Fatalf("after the append: %d records (%d before), problems %v", len(after), len(before), res.Problems)
		}
		for i, r := range before {
			if a := after[i]; a.Pos != r.Pos || a.Type != r.Type || !bytes.Equal(a.Payload, r.Payload) {
				t.Fatalf("record %d at %v changed by the append: now %v at %v", i, r.Pos, a.Type, a.Pos)
			}
		}
		if last := after[len(after)-1]; last.Type != TypeCallEnd || string(last.Payload) != `{"fuzz":1}` {
			t.Fatalf("the last record is %v %q, not the one appended", last.Type, last.Payload)
		}
	})
}

// FuzzDecodeRecord: a record's payload, whatever a valid frame carries (the CRC guards against
// tearing, not against a hand that writes the journal): each decoder returns an error or a
// value that survives its own encoding, never a panic (goccy/go-json reads these payloads).
func FuzzDecodeRecord(f *testing.F) {
	for _, seed := range []string{
		`{"call_id":"a","tool":"t","tenant":"x","start":"2026-11-28T09:00:00Z","argv":["sh","-c","id"],"limits":{"wall_time_ns":5}}`,
		`[{"kind":"exec","exec":{"filename":"/bin/sh","argv":["sh"]}},{"kind":"open","open":{"path":"/etc/shadow","result":-13,"errno":"EACCES"}}]`,
		`{"call_id":"a","exit_status":1,"end_reason":"exit","syscalls":{"read":3},"counts":{"exec":1}}`,
		`[{"kind":"dns","dns":{"name":"\u0000\ud800","answers":["1.2.3.4"]}}]`,
		`{"start":"not a time"}`,
		`[` + strings.Repeat(`{"kind":"exec","exec":{"argv":[`, 50),
		`{"syscalls":{"a":1e400}}`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if s, err := DecodeCallStart(p); err == nil {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatalf("a decoded call_start does not encode: %v", err)
			}
			if _, err := DecodeCallStart(b); err != nil {
				t.Fatalf("a call_start's own encoding does not decode: %v\n%s", err, b)
			}
		}
		if evs, err := DecodeEvents(p); err == nil {
			b, err := json.Marshal(evs)
			if err != nil {
				t.Fatalf("decoded events do not encode: %v", err)
			}
			if _, err := DecodeEvents(b); err != nil {
				t.Fatalf("events' own encoding does not decode: %v\n%s", err, b)
			}
		}
		if r, err := DecodeCallEnd(p); err == nil {
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("a decoded call_end does not encode: %v", err)
			}
			if _, err := DecodeCallEnd(b); err != nil {
				t.Fatalf("a call_end's own encoding does not decode: %v\n%s", err, b)
			}
		}
	})
}
