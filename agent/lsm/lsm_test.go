package lsm

import (
	"errors"
	"os"
	"testing"

	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/sandboxer/probe"
	"github.com/bermsec/berm/testenv/testutil"
)

func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Children{childName: testutil.JSONChild(child), racerName: testutil.JSONChild(racer)})
}

// New must give the answer the kernel calls for, which the probe finds out by loading and
// attaching an LSM program of its own: where BPF LSM works (the testenv/qemu VM) it must load
// and attach; where the kernel refuses it (this host: no BPF trampolines) it must fail with
// ErrRefused, so the agent reports the layer inactive instead of failing or pretending.
func TestNewOnThisKernel(t *testing.T) {
	testutil.RequireRoot(t, "loading eBPF programs (CAP_BPF, CAP_PERFMON)")
	allowed := probe.Run(probe.Cgroups{Err: errors.New("not probed here")}).Has("bpf_lsm")
	if os.Getenv(vmEnv) == "1" && !allowed {
		t.Fatal("the VM boots with BPF LSM active, yet the probe says the kernel refuses it")
	}
	tr, err := tracer.New(tracer.DefaultConfig)
	if err != nil {
		t.Fatalf("tracer: %v", err)
	}
	defer tr.Close()
	l, err := New(tr.Shared())
	if err == nil {
		defer func() {
			if err := l.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
	}
	switch {
	case allowed && err != nil:
		t.Fatalf("the probe loaded and attached BPF LSM, yet New failed: %v", err)
	case !allowed && err == nil:
		t.Fatal("the probe found BPF LSM refused, yet New reported it loaded")
	case !allowed && !errors.Is(err, ErrRefused):
		t.Fatalf("New failed for another reason than the kernel refusing BPF LSM: %v", err)
	case !allowed:
		t.Logf("this kernel refuses BPF LSM and New says so: %v", err)
	}
}
