package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

// ExecArgvMax is how many argv bytes (NUL-terminated strings) an exec approval can hold
// (BERM_XG_ARGV_MAX): a gated program called with more cannot be held to its argv.
const ExecArgvMax = bpf.BermXgArgvMax

// ExecGate holds one call's gated execs to what its approval supervisor decided
// (bpf/lib/execgate.h): the exec hook kills an exec of a gated program that has no decision
// for its thread, or runs another file or argv than the decision's.
type ExecGate struct {
	t      *Tracer
	cgroup uint64
}

// ExecGate is the call's (cgroup's) exec gate.
func (t *Tracer) ExecGate(cgroupID uint64) *ExecGate { return &ExecGate{t: t, cgroup: cgroupID} }

// Gate makes the program with this identity (dev in the kernel's encoding, major<<20|minor)
// one the call may execute only with a decision.
func (g *ExecGate) Gate(dev uint32, ino uint64) error {
	k := bpf.WireBermXgGateKey{CgroupId: g.cgroup, Ino: ino, Dev: dev}
	if err := g.t.proc.BermXgGates.Update(&k, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("gate exec of %d:%d: %w", dev, ino, err)
	}
	return nil
}

// Allow lets the thread's next exec run the file (dev, ino) with exactly argv (its strings,
// each NUL-terminated): written right before the held execve continues.
func (g *ExecGate) Allow(tid uint32, dev uint32, ino uint64, argv []byte) error {
	if len(argv) > ExecArgvMax {
		return fmt.Errorf("allow exec: %d argv bytes, at most %d", len(argv), ExecArgvMax)
	}
	v := bpf.WireBermXgAllow{Ino: ino, Dev: dev, Len: uint32(len(argv))}
	copy(v.Argv[:], argv)
	k := bpf.WireBermXgAllowKey{CgroupId: g.cgroup, Tid: tid}
	if err := g.t.proc.BermXgAllows.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("allow exec of thread %d: %w", tid, err)
	}
	return nil
}

// Revoke drops the thread's decision, if any.
func (g *ExecGate) Revoke(tid uint32) error {
	k := bpf.WireBermXgAllowKey{CgroupId: g.cgroup, Tid: tid}
	if err := g.t.proc.BermXgAllows.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("revoke exec of thread %d: %w", tid, err)
	}
	return nil
}

// clearExecGate drops the cgroup's gates and decisions (its call is over).
func (t *Tracer) clearExecGate(cgroupID uint64) error {
	var errs []error
	var gk bpf.WireBermXgGateKey
	var gv uint8
	var gates []bpf.WireBermXgGateKey
	it := t.proc.BermXgGates.Iterate()
	for it.Next(&gk, &gv) {
		if gk.CgroupId == cgroupID {
			gates = append(gates, gk)
		}
	}
	errs = append(errs, it.Err())
	for _, k := range gates {
		if err := t.proc.BermXgGates.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	var ak bpf.WireBermXgAllowKey
	var av bpf.WireBermXgAllow
	var allows []bpf.WireBermXgAllowKey
	it = t.proc.BermXgAllows.Iterate()
	for it.Next(&ak, &av) {
		if ak.CgroupId == cgroupID {
			allows = append(allows, ak)
		}
	}
	errs = append(errs, it.Err())
	for _, k := range allows {
		if err := t.proc.BermXgAllows.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clear exec gate of cgroup %d: %w", cgroupID, err)
	}
	return nil
}

func init() { wire.Register(bpf.WireBermOpBERM_OP_EXEC_DENY, decodeExecDeny) }

// execDenyReasons say why the exec hook killed an exec.
var execDenyReasons = map[bpf.WireBermXgReason]string{
	bpf.WireBermXgReasonBERM_XG_NO_APPROVAL: "no decision for this exec of a gated program",
	bpf.WireBermXgReasonBERM_XG_OTHER_FILE:  "the file executed is not the one decided on",
	bpf.WireBermXgReasonBERM_XG_OTHER_ARGV:  "the argv executed is not the one decided on",
	bpf.WireBermXgReasonBERM_XG_INTERP:      "a gated program reached as a script's interpreter",
}

// decodeExecDeny reads a gated exec the exec hook killed before it ran.
func decodeExecDeny(e *bpf.WireBermExecDeny, ev *event.Event) {
	ev.Kind = event.KindDenial
	why := execDenyReasons[bpf.WireBermXgReason(e.Reason)]
	if why == "" {
		why = fmt.Sprintf("reason %d", e.Reason)
	}
	ev.Denial = &event.Denial{Layer: event.LayerApproval, Surface: event.SurfaceApproval,
		Rule: "spec.approvals exec: " + why, Object: wire.CString(e.Name[:])}
}
