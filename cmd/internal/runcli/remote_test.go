package runcli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// The front reads bermd's reply without decoding the record (callproto.RawReply): what it
// prints and the --summary it writes must be what decoding the whole record gave.
func TestRawRecordIsTheDecodedOne(t *testing.T) {
	rec := &event.CallRecord{
		CallStart: event.CallStart{CallID: "c-1", Tool: "t", Tenant: "default", Argv: []string{"sh", "-c", "echo <a> & 'b' \u00e9\t\x01"},
			Start: time.Date(2026, 11, 25, 1, 2, 3, 456789, time.UTC), Layers: []string{event.LayerCgroup, event.LayerSeccomp}},
		End: time.Date(2026, 11, 25, 1, 2, 4, 0, time.UTC), EndReason: event.EndTimeout, EndDetail: "wall-time cap of 1s <&>",
		ExitStatus: 137, ExitSignal: 9, Dropped: event.Drop{Kernel: 3, User: 4},
		Syscalls: map[string]uint64{"openat": 12, "execve": 1, "read": 40}, SyscallTotal: 53,
		Denials: map[string]uint64{"landlock": 2},
	}
	// The reply as bermd writes it (cmd/bermd/internal/daemon: a json.Encoder on the connection).
	var wire bytes.Buffer
	if err := json.NewEncoder(&wire).Encode(callproto.Reply{Record: rec, ExitStatus: 137, Warning: "w"}); err != nil {
		t.Fatal(err)
	}
	var raw callproto.RawReply
	if err := json.NewDecoder(&wire).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	end, err := endOf(raw.Record)
	if err != nil {
		t.Fatal(err)
	}
	if want := (callEnd{CallID: "c-1", EndReason: event.EndTimeout, EndDetail: rec.EndDetail, Dropped: rec.Dropped}); end != want {
		t.Errorf("end %+v, want %+v", end, want)
	}
	got, err := indentRecord(raw.Record)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("summary from the raw record:\n%s\nwant:\n%s", got, want)
	}

	// And through finish: the same file as Finish writes from the decoded record.
	dir := t.TempDir()
	o := &Options{Summary: filepath.Join(dir, "raw.json")}
	rawStatus := o.finish(end, func() ([]byte, error) { return indentRecord(raw.Record) }, 137, "")
	rawFile, _ := os.ReadFile(o.Summary)
	o.Summary = filepath.Join(dir, "decoded.json")
	decStatus := o.Finish(rec, 137, "")
	decFile, _ := os.ReadFile(o.Summary)
	if rawStatus != 137 || decStatus != 137 || len(rawFile) == 0 || !bytes.Equal(rawFile, decFile) {
		t.Fatalf("status %d/%d, summaries differ:\n%s\n%s", rawStatus, decStatus, rawFile, decFile)
	}
}
