package agent

import (
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

// A call's queue keeps a share for the events an incident is made of. Noise (failed opens of
// files not there, reads, path-less syscalls that worked, forks and exits) fills the queue up
// to noiseShare of its batches and bytes; past it, only vital records are queued, so a tool
// that floods cheap failed opens to make its next actions unseen loses its noise, not them.
const (
	noiseBatches = inboxBatches * 3 / 4
	noiseBytes   = inboxBytes * 3 / 4
	nodeNoise    = nodeBytes * 3 / 4
)

// vital says whether a raw record is one an incident is made of (vitalOp), reading the
// header and a field or two: the reader classifies every record of a call whose queue is past
// its noise share.
func vital(raw []byte) bool {
	h, ok := wire.Header(raw)
	if !ok {
		return false
	}
	var ret int64
	var flags uint32
	switch bpf.WireBermOp(h.Op) {
	case bpf.WireBermOpBERM_OP_OPEN:
		o, ok := wire.As[bpf.WireBermOpen](raw)
		if !ok {
			return false
		}
		ret, flags = o.Ret, o.Flags
	case bpf.WireBermOpBERM_OP_SYSCALL_PATH:
		s, ok := wire.As[bpf.WireBermSyscallPath](raw)
		if !ok {
			return false
		}
		ret = s.Sc.Ret
	case bpf.WireBermOpBERM_OP_SYSCALL:
		s, ok := wire.As[bpf.WireBermSyscall](raw)
		if !ok {
			return false
		}
		ret = s.Ret
	}
	return vitalOp(h.Op, ret, flags)
}

// vitalOp is the contract's classification (berm_vital in bpf/lib/berm.h, which the kernel
// applies at the emit site to keep the ring's last quarter for vital records): an exec (and
// the environment that comes with it), a connect, a denial by any layer, a destructive
// operation that worked (a path syscall: unlink, rename, chmod, mount, ...; an open for
// writing), and any refusal. TestTheKernelAndTheAgentAgreeOnWhatIsVital runs both.
func vitalOp(op uint16, ret int64, flags uint32) bool {
	switch bpf.WireBermOp(op) {
	case bpf.WireBermOpBERM_OP_EXEC, bpf.WireBermOpBERM_OP_EXEC_ENV, bpf.WireBermOpBERM_OP_EXEC_DENY,
		bpf.WireBermOpBERM_OP_CONNECT, bpf.WireBermOpBERM_OP_NET_DENY, bpf.WireBermOpBERM_OP_LSM_DENY:
		return true
	case bpf.WireBermOpBERM_OP_OPEN:
		if ret < 0 {
			return refused(ret)
		}
		return flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC|unix.O_CREAT) != 0
	case bpf.WireBermOpBERM_OP_SYSCALL_PATH:
		return ret >= 0 || refused(ret)
	case bpf.WireBermOpBERM_OP_SYSCALL:
		return refused(ret)
	}
	return false
}

func refused(ret int64) bool { return ret == -int64(unix.EPERM) || ret == -int64(unix.EACCES) }

// vitalOnly is the batch's vital records (and its user-space event: a credential, approval or
// launcher event is always vital), and how many noise records it left out.
func vitalOnly(b *batch) (*batch, uint64) {
	out := &batch{user: b.user}
	var noise uint64
	b.records(func(raw []byte) {
		if vital(raw) {
			out.add(raw)
		} else {
			noise++
		}
	})
	return out, noise
}
