package tracer

import (
	"os"
	"testing"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading eBPF programs needs root (CAP_BPF, CAP_PERFMON): run `sudo make test`")
	}
}

func TestLoadAttachRegister(t *testing.T) {
	requireRoot(t)
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
