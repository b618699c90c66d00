package sandboxinit

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestProgramRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Program
	}{
		{"empty", nil},
		{"one", Program{{Code: 0x06, K: 0x7fff0000}}},
		{"every field at its extremes", Program{{Code: 0xffff, Jt: 0xff, Jf: 0xff, K: 0xffffffff}, {Code: 0x15, Jt: 1, Jf: 0, K: 59}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Argv: []string{"x"}, Seccomp: tc.p}
			data, err := json.Marshal(Message{Call: &cfg})
			if err != nil {
				t.Fatal(err)
			}
			var back Message
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if len(tc.p) == 0 {
				if len(back.Call.Seccomp) != 0 {
					t.Fatalf("empty program came back as %v", back.Call.Seccomp)
				}
				return
			}
			if !reflect.DeepEqual([]unix.SockFilter(back.Call.Seccomp), []unix.SockFilter(tc.p)) {
				t.Fatalf("got %v, want %v", back.Call.Seccomp, tc.p)
			}
		})
	}
}

// A damaged program is refused whole: installing part of a filter would install another one.
func TestProgramRefusesDamage(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"not a string", `[{"code":6}]`, "seccomp program"},
		{"not base64", `"***"`, "illegal base64"},
		{"cut mid-instruction", `"BgAAAP8AAA=="`, "not a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Program
			err := json.Unmarshal([]byte(tc.json), &p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
