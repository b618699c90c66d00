package policy

import (
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
)

func TestLimitsOneSource(t *testing.T) {
	strictLim := Strict().Limits()
	if strictLim != StrictLimits() {
		t.Fatalf("Strict().Limits() = %+v, StrictLimits() = %+v", strictLim, StrictLimits())
	}
	want := event.Limits{MemoryBytes: 512 << 20, Pids: 256, CPUs: 1, WallTime: 5 * time.Minute, OutputBytes: 16 << 20, TmpBytes: 256 << 20}
	if strictLim != want {
		t.Errorf("strict limits = %+v, want strict.yaml's %+v", strictLim, want)
	}
	p := Strict()
	p.Spec.Resources = Resources{MemoryBytes: 64 << 20, WallTime: time.Second}
	got := p.Limits()
	want.MemoryBytes, want.WallTime = 64<<20, time.Second
	if got != want {
		t.Errorf("a policy setting memory and wall time only: %+v, want the rest from strict: %+v", got, want)
	}
}
