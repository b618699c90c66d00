package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Shared are the maps every berm object declares (bpf/lib/maps.h), created once by the
// tracer: the call table, the event ring and the per-slot drop counters, with the ring's
// wake-up threshold, which every producer of the ring must apply alike. Other loaders (netguard,
// lsm) load their objects against them with Load.
type Shared struct {
	Calls, Events, Drops *ebpf.Map
	WakeupBytes          uint64
}

// Shared returns the tracer's maps for other loaders.
func (t *Tracer) Shared() Shared {
	return Shared{Calls: t.proc.BermCalls, Events: t.proc.BermEvents, Drops: t.proc.BermDrops, WakeupBytes: t.cfg.WakeupBytes}
}

// Load loads spec into objs (a bpf2go Objects struct) with its copies of the shared maps
// replaced by these, the ring sized and the wake-up threshold set as the tracer's. A verifier
// refusal comes back with the verifier's log. LoadAndAssign closes what it created on failure.
func (s Shared) Load(spec *ebpf.CollectionSpec, objs any) error {
	if s.Calls == nil || s.Events == nil || s.Drops == nil {
		return errors.New("the shared calls, events and drops maps are required")
	}
	if err := prepare(spec, s.Events.MaxEntries(), s.WakeupBytes); err != nil {
		return err
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"berm_calls":  s.Calls,
		"berm_events": s.Events,
		"berm_drops":  s.Drops,
	}}
	if err := spec.LoadAndAssign(objs, opts); err != nil {
		return VerifierDetail(err)
	}
	return nil
}

// prepare sizes the spec's ring and sets its wake-up threshold, so that the object's map
// matches the shared one it is replaced by (or creates it, for the tracer's own first object).
func prepare(spec *ebpf.CollectionSpec, ringBytes uint32, wakeupBytes uint64) error {
	ev := spec.Maps["berm_events"]
	if ev == nil {
		return errors.New("object declares no berm_events ring")
	}
	ev.MaxEntries = ringBytes
	if wakeupBytes == 0 {
		return errors.New("no ring wake-up threshold")
	}
	if err := spec.Variables["wakeup_bytes"].Set(wakeupBytes); err != nil {
		return fmt.Errorf("set wakeup_bytes: %w", err)
	}
	return nil
}

// VerifierDetail expands a verifier refusal into its full log, which the default format cuts.
func VerifierDetail(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%+v: %w", ve, err)
	}
	return err
}
