package tracer

import (
	"testing"

	"github.com/bermsec/berm/testenv/testutil"
)

func TestLoadAttachRegister(t *testing.T) {
	testutil.RequireRoot(t, "loading eBPF programs (CAP_BPF, CAP_PERFMON)")
	tr, err := New(DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Register(12345, CallConfig{Slot: 3, Traced: []uint32{87, 263}}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Register(12345, CallConfig{Slot: 4}); err == nil {
		t.Fatal("registering a cgroup twice must fail")
	}
	if err := tr.Register(1, CallConfig{Slot: MaxSlots}); err == nil {
		t.Fatal("slot out of range must fail")
	}
	if err := tr.Unregister(12345); err != nil {
		t.Fatal(err)
	}
	counts, err := tr.TakeSyscallCounts(3)
	if err != nil || len(counts) != 0 {
		t.Fatalf("fresh slot counts = %v, %v", counts, err)
	}
}
