package tracer

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/bermsec/berm/bpf"
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

// attachedTo counts the links in the kernel that run prog: what the node's syscalls run, read
// from the kernel rather than from the tracer's own state.
func attachedTo(t *testing.T, prog *ebpf.Program) int {
	t.Helper()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel gives no program id")
	}
	n := 0
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		li, err := it.Link.Info()
		if err == nil && li.Program == id {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSyscallProgramsRunOnlyWhileACallIsRegistered(t *testing.T) {
	testutil.RequireRoot(t, "loading eBPF programs (CAP_BPF, CAP_PERFMON)")
	linger := SyscallLinger
	SyscallLinger = 100 * time.Millisecond
	t.Cleanup(func() { SyscallLinger = linger })
	tr, err := New(DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	attached := func() int {
		// the two links are read one after the other: a detach (the linger's end) may fall
		// between the reads, so unequal counts are read again; only lasting ones fail
		for try := 0; ; try++ {
			enter, exit := attachedTo(t, tr.sys.BermSysEnter), attachedTo(t, tr.sys.BermSysExit)
			if enter == exit {
				return enter
			}
			if try == 50 {
				t.Fatalf("sys_enter attached %d times, sys_exit %d", enter, exit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	bucket := func(cg uint64) uint32 {
		var v uint32
		if err := tr.sys.BermCallFilter.Lookup(uint32(cg%CallFilterBuckets), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitDetached := func() {
		for deadline := time.Now().Add(time.Minute); attached() != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the syscall programs are still attached a minute after the last call ended")
			}
		}
	}
	if n := attached(); n != 0 {
		t.Fatalf("with no call, the syscall programs are attached %d times: every syscall on the node pays for them", n)
	}
	// Two cgroups in one bucket of the filter: the bucket counts both.
	a, b := uint64(7<<20+5), uint64(7<<20+5+CallFilterBuckets)
	for _, cg := range []uint64{a, b} {
		if err := tr.Register(cg, CallConfig{Slot: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if n := attached(); n != 1 {
		t.Fatalf("with calls registered, the syscall programs are attached %d times, want 1", n)
	}
	if got := bucket(a); got != 2 {
		t.Fatalf("filter bucket of two registered cgroups = %d, want 2", got)
	}
	for range 2 { // unregistering twice takes it out once
		if err := tr.Unregister(a); err != nil {
			t.Fatal(err)
		}
	}
	if got := bucket(b); got != 1 {
		t.Fatalf("filter bucket after one of its two cgroups left = %d, want 1", got)
	}
	time.Sleep(3 * SyscallLinger)
	if n := attached(); n != 1 {
		t.Fatalf("with a call still registered, the syscall programs are attached %d times, want 1", n)
	}
	if err := tr.Unregister(b); err != nil {
		t.Fatal(err)
	}
	if got := bucket(b); got != 0 {
		t.Fatalf("filter bucket with no cgroup = %d, want 0", got)
	}
	waitDetached()
	if tr.SyscallsAttached() {
		t.Fatal("the tracer says attached, the kernel says not")
	}
	// A call registered within the linger keeps them attached: the detach it cancelled never
	// comes.
	if err := tr.Register(a, CallConfig{Slot: 5}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Unregister(a); err != nil {
		t.Fatal(err)
	}
	if err := tr.Register(b, CallConfig{Slot: 6}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * SyscallLinger)
	if n := attached(); n != 1 {
		t.Fatalf("a call registered within the linger: the syscall programs are attached %d times, want 1", n)
	}
	if err := tr.Unregister(b); err != nil {
		t.Fatal(err)
	}
	waitDetached()
}

func TestCallFilterBucketsMatchTheProgram(t *testing.T) {
	spec, err := bpf.LoadSyscalls()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Maps["berm_call_filter"].MaxEntries; got != CallFilterBuckets {
		t.Fatalf("berm_call_filter has %d entries, CallFilterBuckets is %d", got, CallFilterBuckets)
	}
}
