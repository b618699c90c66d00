package callproto

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

var updateWire = flag.Bool("update-wire", false, "write testdata/wire-VERSION.golden for a new protocol version (never overwrites one)")

// wireShape is the wire as PROTOCOL.md publishes it: the version, the magic bytes and frame
// kinds, and every JSON message's fields with their types. The record's promised fields are
// listed too (the record is agent/event's CallRecord; these are the ones clients may rely on).
func wireShape() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version %s\n", Version)
	for _, c := range []struct {
		name string
		v    byte
	}{{"RunMagic", RunMagic}, {"InvokeMagic", InvokeMagic}, {"ReadMagic", ReadMagic}, {"DecideMagic", DecideMagic}, {"FrameStderr", FrameStderr}, {"FrameFallback", FrameFallback}, {"FrameEnd", FrameEnd}} {
		fmt.Fprintf(&b, "byte %s %q\n", c.name, c.v)
	}
	fmt.Fprintf(&b, "const MaxInvocation %d\nconst MaxReadRequest %d\nconst DefaultSocket %s\n", MaxInvocation, MaxReadRequest, DefaultSocket)
	for _, m := range []struct {
		name string
		v    any
	}{{"Request", Request{}}, {"Terminal", Terminal{}}, {"Limits", event.Limits{}}, {"Interrupt", Interrupt{}}, {"Mark", Mark{}}, {"MCP", event.MCP{}}, {"Reply", Reply{}}, {"RawReply", RawReply{}}, {"ReadRequest", ReadRequest{}}, {"ReadReply", ReadReply{}}, {"DecideRequest", DecideRequest{}}, {"DecideReply", DecideReply{}}} {
		fields(&b, m.name, reflect.TypeOf(m.v))
	}
	rec := reflect.TypeOf(event.CallRecord{})
	for _, f := range []string{"call_id", "tenant", "tool", "exit_status", "exit_code", "end_reason", "end_detail", "complete", "denials", "limits"} {
		ok := false
		for _, sf := range reflect.VisibleFields(rec) {
			if strings.Split(sf.Tag.Get("json"), ",")[0] == f {
				fmt.Fprintf(&b, "record %s %s\n", f, kind(sf.Type))
				ok = true
			}
		}
		if !ok {
			fmt.Fprintf(&b, "record %s MISSING\n", f)
		}
	}
	return b.String()
}

func fields(b *strings.Builder, name string, t reflect.Type) {
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() || f.Anonymous {
			continue
		}
		fmt.Fprintf(b, "%s %s %s\n", name, tag, kind(f.Type))
	}
}

func kind(t reflect.Type) string {
	switch {
	case t.String() == "time.Duration", t.String() == "time.Time", t.String() == "json.RawMessage":
		return t.String()
	case t.Kind() == reflect.Pointer:
		return "*" + kind(t.Elem())
	case t.Kind() == reflect.Slice:
		return "[]" + kind(t.Elem())
	case t.Kind() == reflect.Map:
		return "map[" + kind(t.Key()) + "]" + kind(t.Elem())
	case t.Kind() == reflect.Struct:
		return "object"
	}
	return t.Kind().String()
}

// The published wire changes only with a new version: testdata holds each version's wire as
// it was published, and one is never rewritten. A change to a message, a magic byte or a frame
// fails here until Version is bumped (minor: fields added that a peer may ignore; major:
// anything else) and the new version's file is written (go test -run TestWire -update-wire).
func TestWireChangesOnlyWithAVersionBump(t *testing.T) {
	got := wireShape()
	golden := filepath.Join("testdata", "wire-"+Version+".golden")
	want, err := os.ReadFile(golden)
	if errors.Is(err, os.ErrNotExist) && *updateWire {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatalf("no published wire for version %s (%v): a new version writes its file with -update-wire", Version, err)
	}
	if got != string(want) {
		t.Fatalf("the wire differs from version %s's as published (%s), and the version is the same: bump callproto.Version and write the new version's file (-update-wire); PROTOCOL.md describes the change.\n--- published\n%s--- now\n%s", Version, golden, want, got)
	}
}

// PROTOCOL.md is the published text: it names the version and every field of every message.
func TestProtocolDocumentNamesEveryField(t *testing.T) {
	doc, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "Version: "+Version) {
		t.Errorf("PROTOCOL.md does not say Version: %s", Version)
	}
	for _, line := range strings.Split(wireShape(), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] == "byte" || f[0] == "const" || f[0] == "RawReply" {
			continue
		}
		if !strings.Contains(string(doc), "`"+strings.Split(f[1], ",")[0]+"`") {
			t.Errorf("PROTOCOL.md does not name %s's field `%s`", f[0], f[1])
		}
	}
}

func TestCheckVersionRefusesAnotherMajor(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{{"", true}, {"1.0", true}, {"1.7", true}, {"1", true}, {"2.0", false}, {"0.9", false}, {"x", false}, {"-1.0", false}} {
		if err := CheckVersion(tc.v); (err == nil) != tc.ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", tc.v, err, tc.ok)
		}
	}
}
