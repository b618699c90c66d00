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
	// RingIn and RingOut are each slot's ring accounting (reserved by the kernel, read by the
	// agent); RingShare the bytes a call may hold of a ring more than half full.
	RingIn, RingOut *ebpf.Map
	RingShare       uint64
	// ConnectAddr carries the kernel's copy of a connect's destination from the cgroup
	// connect hooks (netguard) to the connect's exit (the tracer).
	ConnectAddr *ebpf.Map
	// Pending is each task's capture of the syscall it is in: the entry's copy of its user
	// memory arguments, and the kernel's view of its objects that the BPF LSM hooks (lsm) add
	// while it runs, which the syscall's exit (the tracer) records.
	Pending *ebpf.Map
}

// Shared returns the tracer's maps for other loaders.
func (t *Tracer) Shared() Shared {
	return Shared{Calls: t.proc.BermCalls, Events: t.proc.BermEvents, Drops: t.proc.BermDrops, WakeupBytes: t.cfg.WakeupBytes,
		RingIn: t.proc.BermRingIn, RingOut: t.proc.BermRingOut, RingShare: t.cfg.RingShare, ConnectAddr: t.proc.BermConnectAddr,
		Pending: t.proc.BermPending}
}

// Load loads spec into objs (a bpf2go Objects struct) with its copies of the shared maps
// replaced by these, the ring sized and the wake-up threshold set as the tracer's. A verifier
// refusal comes back with the verifier's log. LoadAndAssign closes what it created on failure.
func (s Shared) Load(spec *ebpf.CollectionSpec, objs any) error { return s.LoadPinned(spec, objs, "") }

// LoadPinned is Load with the object's pinned maps (LIBBPF_PIN_BY_NAME) under pinPath.
func (s Shared) LoadPinned(spec *ebpf.CollectionSpec, objs any, pinPath string) error {
	if s.Calls == nil || s.Events == nil || s.Drops == nil || s.RingIn == nil || s.RingOut == nil || s.ConnectAddr == nil || s.Pending == nil {
		return errors.New("the shared calls, events, drops, ring share, connect address and pending maps are required")
	}
	if err := prepare(spec, s.Events.MaxEntries(), s.WakeupBytes, s.RingShare); err != nil {
		return err
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"berm_calls":        s.Calls,
		"berm_events":       s.Events,
		"berm_drops":        s.Drops,
		"berm_ring_in":      s.RingIn,
		"berm_ring_out":     s.RingOut,
		"berm_connect_addr": s.ConnectAddr,
		"berm_pending":      s.Pending,
	}}
	opts.Maps.PinPath = pinPath
	if err := spec.LoadAndAssign(objs, opts); err != nil {
		return VerifierDetail(err)
	}
	return nil
}

// prepare sizes the spec's ring and sets its wake-up threshold, so that the object's map
// matches the shared one it is replaced by (or creates it, for the tracer's own first object).
func prepare(spec *ebpf.CollectionSpec, ringBytes uint32, wakeupBytes, ringShare uint64) error {
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
	if err := spec.Variables["ring_share"].Set(ringShare); err != nil {
		return fmt.Errorf("set ring_share: %w", err)
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
