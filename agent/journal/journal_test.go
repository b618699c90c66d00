package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
)

func collect(t *testing.T, dir string) ([]Record, ScanResult) {
	t.Helper()
	var recs []Record
	res, err := Scan(dir, Position{}, func(r Record) error {
		r.Payload = append([]byte(nil), r.Payload...)
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs, res
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := &event.CallStart{CallID: "c1", Tool: "t", Tenant: "n", Start: time.Unix(1, 0).UTC()}
	if err := w.AppendCallStart(start); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendEvents([]event.Event{{CallID: "c1", Seq: 1, Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/sh"}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendCallEnd(&event.CallRecord{CallStart: *start, EndReason: event.EndExit}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	recs, res := collect(t, dir)
	if len(recs) != 3 || len(res.Problems) != 0 {
		t.Fatalf("got %d records, problems %v", len(recs), res.Problems)
	}
	want := []RecordType{TypeCallStart, TypeEvents, TypeCallEnd}
	for i, r := range recs {
		if r.Type != want[i] {
			t.Errorf("record %d: type %s, want %s", i, r.Type, want[i])
		}
	}
	evs, err := DecodeEvents(recs[1].Payload)
	if err != nil || len(evs) != 1 || evs[0].Exec.Filename != "/bin/sh" {
		t.Fatalf("events %+v %v", evs, err)
	}
	if res.End != recs[2].Next {
		t.Errorf("scan end %v, want %v", res.End, recs[2].Next)
	}
	// Resuming from the end reads nothing more.
	n := 0
	Scan(dir, res.End, func(Record) error { n++; return nil })
	if n != 0 {
		t.Errorf("resume read %d records", n)
	}
}

// Every way a tail can be torn is skipped by readers, reported, and cut by the next writer;
// nothing before it is lost.
func TestTornTails(t *testing.T) {
	full := appendFrame(nil, TypeEvents, []byte(`[{"call_id":"x","seq":9}]`))
	cases := []struct {
		name string
		tail []byte
	}{
		{"header only partly written", full[:5]},
		{"payload partly written", full[:len(full)-3]},
		{"crc mismatch", append(append([]byte{}, full[:len(full)-1]...), 'X')},
		{"zero length", make([]byte, 12)},
		{"absurd length", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := OpenWriter(dir)
			for i := 0; i < 3; i++ {
				if err := w.AppendCallStart(&event.CallStart{CallID: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			w.Close()
			seg := segmentPath(dir, 1)
			good, _ := os.Stat(seg)
			f, _ := os.OpenFile(seg, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(tc.tail)
			f.Close()

			recs, res := collect(t, dir)
			if len(recs) != 3 {
				t.Fatalf("read %d records before the torn tail, want 3", len(recs))
			}
			if len(res.Problems) != 1 || res.Problems[0].Pos.Offset != good.Size() {
				t.Fatalf("problems %v, want one at offset %d", res.Problems, good.Size())
			}
			w2, _ := OpenWriter(dir)
			if err := w2.AppendCallStart(&event.CallStart{CallID: "after"}); err != nil {
				t.Fatal(err)
			}
			w2.Close()
			recs, res = collect(t, dir)
			if len(recs) != 4 || len(res.Problems) != 0 {
				t.Fatalf("after the next write: %d records, problems %v", len(recs), res.Problems)
			}
			s, _ := DecodeCallStart(recs[3].Payload)
			if s.CallID != "after" {
				t.Fatalf("last record %q", s.CallID)
			}
		})
	}
}

func TestConcurrentWritersAndRotation(t *testing.T) {
	old := SegmentBytes
	SegmentBytes = 4096
	defer func() { SegmentBytes = old }()
	dir := t.TempDir()
	var wg sync.WaitGroup
	const writers, each = 4, 200
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w, err := OpenWriter(dir)
			if err != nil {
				t.Error(err)
				return
			}
			defer w.Close()
			for j := 0; j < each; j++ {
				if err := w.AppendCallStart(&event.CallStart{CallID: fmt.Sprintf("w%d-%d", i, j)}); err != nil {
					t.Error(err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	recs, res := collect(t, dir)
	if len(recs) != writers*each || len(res.Problems) != 0 {
		t.Fatalf("%d records (want %d), problems %v", len(recs), writers*each, res.Problems)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "segment-*.journal"))
	if len(segs) < 2 {
		t.Fatalf("no rotation: %v", segs)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		s, _ := DecodeCallStart(r.Payload)
		if seen[s.CallID] {
			t.Fatalf("duplicate %s", s.CallID)
		}
		seen[s.CallID] = true
	}
	size, _ := Size(dir, Position{})
	var total int64
	for _, s := range segs {
		st, _ := os.Stat(s)
		total += st.Size()
	}
	if size != total {
		t.Fatalf("Size = %d, want %d", size, total)
	}
}
