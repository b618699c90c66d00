package event

import (
	"encoding/hex"
	"testing"
)

func TestValidTraceParentAcceptsOnlyW3CVersion00(t *testing.T) {
	for _, tc := range []struct {
		tp string
		ok bool
	}{
		{"", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"garbage", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473\x1b-00f067aa0ba902b7-01", false},
	} {
		if err := ValidTraceParent(tc.tp); (err == nil) != tc.ok {
			t.Errorf("ValidTraceParent(%q) = %v, want ok %v", tc.tp, err, tc.ok)
		}
	}
}

func TestParseTraceParentGivesTheIDsAndFlags(t *testing.T) {
	tid, sid, flags, err := ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil || hex.EncodeToString(tid[:]) != "4bf92f3577b34da6a3ce929d0e0e4736" || hex.EncodeToString(sid[:]) != "00f067aa0ba902b7" || flags != 1 {
		t.Fatalf("got %x %x %d %v", tid, sid, flags, err)
	}
}
