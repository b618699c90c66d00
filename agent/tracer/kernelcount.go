package tracer

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/bermsec/berm/bpf"
)

// KernelCount is what the kernel counted of one syscall instead of reporting it.
type KernelCount struct {
	N, Failed uint64
}

// CountInKernel makes the kernel count the slot's syscall nr instead of emitting an event for
// each (berm_aggmask): for a call past its event budget whose flood of nr the agent would only
// aggregate. Refusals (EPERM) are still reported one by one.
func (t *Tracer) CountInKernel(slot uint32, nr uint32) error {
	if slot >= MaxSlots || nr >= MaxSyscalls {
		return fmt.Errorf("count syscall %d of slot %d in the kernel: out of range", nr, slot)
	}
	var m bpf.WireBermAggmask
	if err := t.sys.BermAggmask.Lookup(slot, &m); err != nil {
		return fmt.Errorf("read kernel-counted syscalls of slot %d: %w", slot, err)
	}
	m.W[nr/64] |= 1 << (nr % 64)
	if err := t.sys.BermAggmask.Update(slot, &m, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("count syscall %d of slot %d in the kernel: %w", nr, slot, err)
	}
	return nil
}

// TakeKernelCounts returns what the kernel counted for the slot instead of reporting it, by
// syscall number, and resets the slot (mask and counts) for its next call.
func (t *Tracer) TakeKernelCounts(slot uint32) (map[uint32]KernelCount, error) {
	var c bpf.WireBermAggcounts
	if err := t.sys.BermAggcounts.Lookup(slot, &c); err != nil {
		return nil, fmt.Errorf("read kernel counts of slot %d: %w", slot, err)
	}
	out := map[uint32]KernelCount{}
	for nr, n := range c.N {
		if n > 0 {
			out[uint32(nr)] = KernelCount{N: n, Failed: c.Failed[nr]}
		}
	}
	return out, t.ResetKernelCounts(slot)
}

// ResetKernelCounts clears the slot's kernel-counted syscalls and their counts: the mask first,
// so nothing is counted between the two.
func (t *Tracer) ResetKernelCounts(slot uint32) error {
	if err := t.sys.BermAggmask.Update(slot, &bpf.WireBermAggmask{}, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("reset kernel-counted syscalls of slot %d: %w", slot, err)
	}
	if err := t.sys.BermAggcounts.Update(slot, &bpf.WireBermAggcounts{}, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("reset kernel counts of slot %d: %w", slot, err)
	}
	return nil
}
