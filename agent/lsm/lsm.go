// Package lsm loads and attaches berm's BPF LSM programs (bpf/lsm.bpf.c), which enforce a
// call's filesystem policy (the grants of its Landlock ruleset) in the kernel's security hooks
// and report every refusal, or in audit mode every would-be refusal, as a denial event.
//
// Many kernels refuse BPF LSM (not in the lsm= boot list, no BPF trampolines): New then fails
// with an error wrapping ErrRefused, and the agent reports the layer inactive.
package lsm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
)

// ErrRefused says the kernel does not allow BPF LSM programs here.
var ErrRefused = errors.New("kernel refused BPF LSM")

// LSM holds the loaded, attached programs and the installed policies.
type LSM struct {
	objs  bpf.LsmObjects
	links []link.Link

	mu   sync.Mutex
	keys map[uint64][]bpf.WireBermLsmKey // per call, to remove its rules
}

// New loads and attaches the programs, or nothing: on any failure what was done is undone.
func New(shared tracer.Shared) (_ *LSM, err error) {
	l := &LSM{keys: map[uint64][]bpf.WireBermLsmKey{}}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()

	spec, err := bpf.LoadLsm()
	if err != nil {
		return nil, fmt.Errorf("load lsm spec: %w", err)
	}
	if err := shared.Load(spec, &l.objs); err != nil {
		return nil, fmt.Errorf("load lsm objects: %w", refused(err))
	}
	for _, p := range []struct {
		hook string
		prog *ebpf.Program
	}{
		{"file_open", l.objs.BermFileOpen},
		{"bprm_check_security", l.objs.BermBprmCheck},
		{"path_unlink", l.objs.BermPathUnlink},
		{"path_rmdir", l.objs.BermPathRmdir},
		{"path_rename", l.objs.BermPathRename},
		{"path_mknod", l.objs.BermPathMknod},
		{"path_mkdir", l.objs.BermPathMkdir},
		{"path_truncate", l.objs.BermPathTruncate},
	} {
		lk, err := link.AttachLSM(link.LSMOptions{Program: p.prog})
		if err != nil {
			return nil, fmt.Errorf("attach lsm/%s: %w", p.hook, refused(err))
		}
		l.links = append(l.links, lk)
	}
	return l, nil
}

// refused marks the errors by which a kernel says it does not do BPF LSM: EPERM (BPF LSM
// not active, or trampolines refused), EOPNOTSUPP/ENOTSUPP (no trampoline support) and the
// library's ErrNotSupported.
func refused(err error) error {
	const enotsupp = unix.Errno(524) // kernel-internal ENOTSUPP, seen by user space as is
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w (EPERM: BPF LSM not enabled in lsm= or trampolines refused): %w", ErrRefused, err)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, enotsupp), errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w (not supported): %w", ErrRefused, err)
	}
	return err
}

// kernelDev is a device number as the kernel keeps it in super_block.s_dev (major << 20 |
// minor), from stat's user-space encoding.
func kernelDev(dev uint64) uint32 {
	return unix.Major(dev)<<20 | unix.Minor(dev)
}

// SetPolicy installs (or replaces) the rules of the call in cgroupID. Each rule's path is
// resolved to its inode now: the grant follows the inode, as Landlock's does. Install it
// before the call's first process runs: a registered call without rules is refused
// everything. Rules naming the same inode (hard links, bind mounts) unite their rights.
func (l *LSM) SetPolicy(cgroupID uint64, rules ...Rule) error {
	vals := map[bpf.WireBermLsmKey]bpf.WireBermLsmRule{}
	var keys []bpf.WireBermLsmKey
	for _, r := range rules {
		var st unix.Stat_t
		if err := unix.Stat(r.Path, &st); err != nil {
			return fmt.Errorf("lsm policy of cgroup %d: stat %s: %w", cgroupID, r.Path, err)
		}
		k := bpf.WireBermLsmKey{CgroupId: cgroupID, Ino: st.Ino, Dev: kernelDev(st.Dev)}
		v, seen := vals[k]
		if !seen {
			keys = append(keys, k)
			v.Rule = r.ID
		}
		v.Rights |= uint32(r.Rights)
		vals[k] = v
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	// New rules first, stale ones after: an update never passes through a state that grants
	// more than the old or the new policy.
	for _, k := range keys {
		v := vals[k]
		if err := l.objs.BermLsmRules.Update(&k, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("lsm policy of cgroup %d: install rule %d: %w", cgroupID, v.Rule, err)
		}
	}
	for _, k := range l.keys[cgroupID] {
		if _, ok := vals[k]; ok {
			continue
		}
		if err := l.objs.BermLsmRules.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("lsm policy of cgroup %d: remove stale rule: %w", cgroupID, err)
		}
	}
	l.keys[cgroupID] = keys
	return nil
}

// Remove drops the call's rules (after its cgroup is gone or unregistered).
func (l *LSM) Remove(cgroupID uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, k := range l.keys[cgroupID] {
		if err := l.objs.BermLsmRules.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	delete(l.keys, cgroupID)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove lsm policy of cgroup %d: %w", cgroupID, err)
	}
	return nil
}

// Close detaches and unloads everything; the shared maps stay the tracer's.
func (l *LSM) Close() error {
	var errs []error
	for _, lk := range l.links {
		errs = append(errs, lk.Close())
	}
	l.links = nil
	errs = append(errs, l.objs.Close())
	return errors.Join(errs...)
}
