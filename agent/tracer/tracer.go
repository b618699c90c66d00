// Package tracer loads berm's eBPF objects (bpf/process.bpf.c, bpf/syscalls.bpf.c), shares
// their common maps, attaches them and gives typed access to the per-call maps.
package tracer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/bpf"
)

// MaxSlots is how many calls can be traced at once on a node (BERM_MAX_SLOTS; the contract
// test checks it against berm.h).
const MaxSlots = 256

// MaxSyscalls is the size of a call's syscall counter row (BERM_MAX_SYSCALLS).
const MaxSyscalls = 512

// Config tunes the objects at load time.
type Config struct {
	// RingBytes is the event ring buffer's size: a power of two, a multiple of the page size.
	RingBytes uint32
	// WakeupBytes: the kernel wakes the reader only once this much data waits; below it the
	// reader picks events up on its own deadline. Wake-ups dominate the cost of an event.
	WakeupBytes uint64
	// RingShare: once the ring is more than half full, a call holding this many bytes of it
	// gets no more (its events are dropped and counted against it). 0: RingBytes/8.
	RingShare uint64
}

// DefaultConfig is a 16 MiB ring (about 50k open events: bursts of a busy tool while the
// reader shares the CPU) with wake-ups every 64 KiB.
var DefaultConfig = Config{RingBytes: 16 << 20, WakeupBytes: 64 << 10}

// CallFilterBuckets is BERM_CALL_FILTER: the buckets of the syscall programs' early-out.
const CallFilterBuckets = 4096

// SyscallLinger is how long the syscall programs stay attached after the node's last call
// ended: back-to-back calls do not attach and detach them for each call.
var SyscallLinger = 2 * time.Second

// Tracer holds the loaded, attached objects.
type Tracer struct {
	cfg   Config
	proc  bpf.ProcessObjects
	sys   bpf.SyscallsObjects
	links []link.Link

	// The raw syscall tracepoints run a program for every syscall of every task on the node:
	// they are attached only while a call is registered (and SyscallLinger after the last),
	// so a node with no call pays nothing per syscall. sysMu orders Register and Unregister
	// with the attachment and with the early-out's filter (berm_call_filter).
	sysMu      sync.Mutex
	registered map[uint64]bool
	sysLinks   []link.Link
	detachGen  uint64 // bumped by each attach: a detach timer of an older generation does nothing
	detachTime *time.Timer
}

// New loads and attaches everything, or nothing: on any failure what was done is undone.
func New(cfg Config) (_ *Tracer, err error) {
	if cfg.RingBytes == 0 {
		cfg.RingBytes = DefaultConfig.RingBytes
	}
	if cfg.WakeupBytes == 0 {
		cfg.WakeupBytes = DefaultConfig.WakeupBytes
	}
	t := &Tracer{cfg: cfg}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()

	procSpec, err := bpf.LoadProcess()
	if err != nil {
		return nil, fmt.Errorf("load process spec: %w", err)
	}
	if cfg.RingShare == 0 {
		cfg.RingShare = uint64(cfg.RingBytes) / 8
	}
	t.cfg = cfg
	// The first object creates the shared maps; the others are loaded against them.
	if err := prepare(procSpec, cfg.RingBytes, cfg.WakeupBytes, cfg.RingShare); err != nil {
		return nil, fmt.Errorf("load process objects: %w", err)
	}
	if err := procSpec.LoadAndAssign(&t.proc, nil); err != nil {
		return nil, fmt.Errorf("load process objects: %w", VerifierDetail(err))
	}

	sysSpec, err := bpf.LoadSyscalls()
	if err != nil {
		return nil, fmt.Errorf("load syscalls spec: %w", err)
	}
	if err := t.Shared().Load(sysSpec, &t.sys); err != nil {
		return nil, fmt.Errorf("load syscalls objects: %w", err)
	}

	t.registered = map[uint64]bool{}
	links, err := attachRaw([]rawProg{
		{"sched_process_exec", t.proc.BermSchedExec},
		{"sched_process_fork", t.proc.BermSchedFork},
		{"sched_process_exit", t.proc.BermSchedExit},
	})
	if err != nil {
		return nil, err
	}
	t.links = links
	return t, nil
}

type rawProg struct {
	name string
	prog *ebpf.Program
}

// attachRaw attaches every program to its tp_btf tracepoint, or none.
func attachRaw(progs []rawProg) ([]link.Link, error) {
	var links []link.Link
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			for _, l := range links {
				_ = l.Close()
			}
			return nil, fmt.Errorf("attach tp_btf/%s: %w", p.name, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// attachSyscalls attaches the syscall programs if they are not, and cancels a pending detach.
// Called with sysMu held, before a call's cgroup is registered: its tool's first syscall is
// seen.
func (t *Tracer) attachSyscalls() error {
	t.detachGen++
	if t.detachTime != nil {
		t.detachTime.Stop()
		t.detachTime = nil
	}
	if t.sysLinks != nil {
		return nil
	}
	links, err := attachRaw([]rawProg{{"sys_enter", t.sys.BermSysEnter}, {"sys_exit", t.sys.BermSysExit}})
	if err != nil {
		return err
	}
	t.sysLinks = links
	return nil
}

// detachSyscallsLater detaches the syscall programs SyscallLinger from now unless a call
// registers before. Called with sysMu held, once no call is registered.
func (t *Tracer) detachSyscallsLater() {
	if t.sysLinks == nil || t.detachTime != nil {
		return
	}
	gen := t.detachGen
	t.detachTime = time.AfterFunc(SyscallLinger, func() {
		t.sysMu.Lock()
		defer t.sysMu.Unlock()
		if gen != t.detachGen || len(t.registered) > 0 {
			return
		}
		t.detachTime = nil
		t.closeSyscalls()
	})
}

func (t *Tracer) closeSyscalls() error {
	var errs []error
	for _, l := range t.sysLinks {
		errs = append(errs, l.Close())
	}
	t.sysLinks = nil
	return errors.Join(errs...)
}

// SyscallsAttached says whether the raw syscall programs are attached now (tests, metrics).
func (t *Tracer) SyscallsAttached() bool {
	t.sysMu.Lock()
	defer t.sysMu.Unlock()
	return t.sysLinks != nil
}

// addFilter adds n (1 or -1) to the early-out filter's bucket of cgroupID.
func (t *Tracer) addFilter(cgroupID uint64, n int32) error {
	k := uint32(cgroupID & (CallFilterBuckets - 1))
	var v uint32
	if err := t.sys.BermCallFilter.Lookup(k, &v); err != nil {
		return fmt.Errorf("read call filter bucket %d: %w", k, err)
	}
	v = uint32(int32(v) + n)
	if err := t.sys.BermCallFilter.Update(k, v, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("write call filter bucket %d: %w", k, err)
	}
	return nil
}

// Events is the ring buffer every program writes to.
func (t *Tracer) Events() *ebpf.Map { return t.proc.BermEvents }

// ResetShare zeroes a slot's ring accounting for its next call (the slot's last call has
// ended: none of its events is left in the ring).
func (t *Tracer) ResetShare(slot uint32) error {
	for _, m := range []*ebpf.Map{t.proc.BermRingIn, t.proc.BermRingOut} {
		if err := m.Update(slot, uint64(0), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("reset ring share of slot %d: %w", slot, err)
		}
	}
	return nil
}

// Consumed tells the kernel how many bytes of the slot's events the agent has read in all.
func (t *Tracer) Consumed(slot uint32, bytes uint64) error {
	return t.proc.BermRingOut.Update(slot, bytes, ebpf.UpdateAny)
}

// CallSetup is BERM_CALL_SETUP.
const CallSetup = 2

// CallAudit is BERM_CALL_AUDIT: the enforcement layers record would-be denials and block nothing.
const CallAudit = 1

// AlwaysTraced are the syscalls in every call's trail, whatever its traced set: destructive
// changes of content (truncate, fallocate and its punch-hole), times (a wipe with the mtime
// restored), names, links, modes, owners, device nodes, and deletions.
var AlwaysTraced = []uint32{
	unix.SYS_TRUNCATE, unix.SYS_FTRUNCATE, unix.SYS_FALLOCATE,
	unix.SYS_UTIME, unix.SYS_UTIMES, unix.SYS_FUTIMESAT, unix.SYS_UTIMENSAT,
	unix.SYS_RENAME, unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2,
	unix.SYS_LINK, unix.SYS_LINKAT, unix.SYS_SYMLINK, unix.SYS_SYMLINKAT,
	unix.SYS_CHMOD, unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2,
	unix.SYS_CHOWN, unix.SYS_FCHOWN, unix.SYS_LCHOWN, unix.SYS_FCHOWNAT,
	unix.SYS_MKNOD, unix.SYS_MKNODAT,
	unix.SYS_UNLINK, unix.SYS_UNLINKAT, unix.SYS_RMDIR,
}

// CallConfig is what the kernel knows about a call.
type CallConfig struct {
	Slot uint32
	// Traced are the syscall numbers that get an individual event (AlwaysTraced are added).
	Traced []uint32
	// RefusalsOnly are traced syscalls reported only when refused (EPERM): those traced for a
	// filter rule that refuses some of their calls, not the many it lets through.
	RefusalsOnly []uint32
	// Audit: kernel-side enforcement (the cgroup sock hooks) reports would-be denials and
	// blocks nothing (policy mode: audit).
	Audit bool
	// InitTGID is the sandbox init, InitExe its binary's file name, StageExe the tool's stage's:
	// until a child of the init executes anything else (the tool), the call's syscalls are
	// set-up, not counted. 0: none.
	InitTGID uint32
	InitExe  string
	StageExe string
}

// Register makes the programs report the cgroup's processes as the call in slot.
func (t *Tracer) Register(cgroupID uint64, cfg CallConfig) error {
	if cfg.Slot >= MaxSlots {
		return fmt.Errorf("register cgroup %d: slot %d out of range", cgroupID, cfg.Slot)
	}
	v := bpf.WireBermCallCfg{Slot: cfg.Slot}
	if cfg.Audit {
		v.Flags |= CallAudit
	}
	if cfg.InitTGID != 0 {
		// Set-up until the init's child executes the tool: its syscalls are not counted.
		v.Flags |= CallSetup
		v.InitTgid = cfg.InitTGID
		for i := 0; i < len(v.InitExe)-1 && i < len(cfg.InitExe); i++ {
			v.InitExe[i] = int8(cfg.InitExe[i])
		}
		for i := 0; i < len(v.StageExe)-1 && i < len(cfg.StageExe); i++ {
			v.StageExe[i] = int8(cfg.StageExe[i])
		}
	}
	for _, nr := range slices.Concat(cfg.Traced, AlwaysTraced) {
		if nr >= MaxSyscalls {
			return fmt.Errorf("register cgroup %d: syscall %d out of range", cgroupID, nr)
		}
		v.SysMask[nr/64] |= 1 << (nr % 64)
	}
	for _, nr := range cfg.RefusalsOnly {
		if nr >= MaxSyscalls {
			return fmt.Errorf("register cgroup %d: syscall %d out of range", cgroupID, nr)
		}
		v.RefusedMask[nr/64] |= 1 << (nr % 64)
	}
	t.sysMu.Lock()
	defer t.sysMu.Unlock()
	if t.registered[cgroupID] {
		return fmt.Errorf("register cgroup %d: already registered", cgroupID)
	}
	// Attached, then in the filter, then in berm_calls: each before the call's tool runs.
	if err := t.attachSyscalls(); err != nil {
		if len(t.registered) == 0 {
			t.detachSyscallsLater()
		}
		return fmt.Errorf("register cgroup %d: %w", cgroupID, err)
	}
	if err := t.addFilter(cgroupID, 1); err != nil {
		if len(t.registered) == 0 {
			t.detachSyscallsLater()
		}
		return fmt.Errorf("register cgroup %d: %w", cgroupID, err)
	}
	if err := t.proc.BermCalls.Update(cgroupID, &v, ebpf.UpdateNoExist); err != nil {
		_ = t.addFilter(cgroupID, -1)
		if len(t.registered) == 0 {
			t.detachSyscallsLater()
		}
		return fmt.Errorf("register cgroup %d: %w", cgroupID, err)
	}
	t.registered[cgroupID] = true
	return nil
}

// Unregister stops reporting the cgroup. Once no cgroup is registered, the syscall programs
// are detached SyscallLinger later.
func (t *Tracer) Unregister(cgroupID uint64) error {
	t.sysMu.Lock()
	defer t.sysMu.Unlock()
	if err := t.proc.BermCalls.Delete(cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unregister cgroup %d: %w", cgroupID, err)
	}
	if t.registered[cgroupID] {
		delete(t.registered, cgroupID)
		if err := t.addFilter(cgroupID, -1); err != nil {
			return fmt.Errorf("unregister cgroup %d: %w", cgroupID, err)
		}
		if len(t.registered) == 0 {
			t.detachSyscallsLater()
		}
	}
	return t.clearExecGate(cgroupID)
}

// TakeSyscallCounts returns the slot's per-syscall counts (summed over CPUs) and zeroes them
// for the slot's next call: one lookup and one update, whatever the number of syscalls.
func (t *Tracer) TakeSyscallCounts(slot uint32) (map[uint32]uint64, error) {
	var per []bpf.WireBermSyscounts
	if err := t.sys.BermSyscounts.Lookup(slot, &per); err != nil {
		return nil, fmt.Errorf("read syscall counters of slot %d: %w", slot, err)
	}
	counts := map[uint32]uint64{}
	for _, cpu := range per {
		for nr, n := range cpu.N {
			if n > 0 {
				counts[uint32(nr)] += n
			}
		}
	}
	if len(counts) > 0 {
		clear(per)
		if err := t.sys.BermSyscounts.Update(slot, per, ebpf.UpdateExist); err != nil {
			return nil, fmt.Errorf("reset syscall counters of slot %d: %w", slot, err)
		}
	}
	return counts, nil
}

// Drops are a call's records lost in the kernel: Vital ones, and Noise dropped to keep the
// ring's last quarter for vital records (or lost to a full ring) (struct berm_drops).
type Drops struct{ Vital, Noise uint64 }

// Total is every record lost.
func (d Drops) Total() uint64 { return d.Vital + d.Noise }

// TakeDrops returns the records of slot lost in the kernel and zeroes the count.
func (t *Tracer) TakeDrops(slot uint32) (Drops, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return Drops{}, fmt.Errorf("possible cpus: %w", err)
	}
	per := make([]bpf.WireBermDrops, ncpu)
	if err := t.proc.BermDrops.Lookup(slot, &per); err != nil {
		return Drops{}, fmt.Errorf("read drops of slot %d: %w", slot, err)
	}
	var sum Drops
	for _, v := range per {
		sum.Vital += v.Vital
		sum.Noise += v.Noise
	}
	if sum.Total() > 0 {
		clear(per)
		if err := t.proc.BermDrops.Update(slot, per, ebpf.UpdateExist); err != nil {
			return Drops{}, fmt.Errorf("reset drops of slot %d: %w", slot, err)
		}
	}
	return sum, nil
}

// Close detaches and unloads everything.
func (t *Tracer) Close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	t.sysMu.Lock()
	t.detachGen++
	if t.detachTime != nil {
		t.detachTime.Stop()
		t.detachTime = nil
	}
	errs = append(errs, t.closeSyscalls())
	t.sysMu.Unlock()
	errs = append(errs, t.sys.Close(), t.proc.Close())
	return errors.Join(errs...)
}
