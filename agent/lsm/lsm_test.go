package lsm

import (
	"errors"
	"os"
	"testing"

	"github.com/bermsec/berm/agent/tracer"
)

func TestMain(m *testing.M) {
	if s := os.Getenv(childEnv); s != "" {
		os.Exit(child(s))
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading eBPF programs needs root (CAP_BPF, CAP_PERFMON): run `sudo make test`")
	}
}

// On a kernel that refuses BPF LSM, New must say so in a way the agent can tell apart (the
// layer is then reported inactive); where the kernel allows it, it must load and attach.
func TestNewOnThisKernel(t *testing.T) {
	requireRoot(t)
	tr, err := tracer.New(tracer.DefaultConfig)
	if err != nil {
		t.Fatalf("tracer: %v", err)
	}
	defer tr.Close()
	l, err := New(tr.Shared())
	if err != nil {
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("New failed for another reason than the kernel refusing BPF LSM: %v", err)
		}
		t.Logf("this kernel refuses BPF LSM, as expected where it is not in lsm=: %v", err)
		return
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}
