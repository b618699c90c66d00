// Package netguard enforces a call's egress policy in the kernel: cgroup sock programs
// (bpf/netpolicy.bpf.c), attached once above the calls' cgroups (or to a call's own), judge
// connect, unconnected UDP sends and socket() against per-call maps, and report every denial
// in the shared event ring.
//
// A call's policy is a version keyed by a generation number that is never reused: its
// prefixes in one LPM trie (keys start with the generation), its socket rules in a record,
// and the call's slot holds the generation in effect in one 8-byte word of an mmapped array.
// Installing, replacing or removing a policy writes the new version's entries, stores the
// word atomically, and leaves the old version to a background cleaner that deletes it after an
// RCU grace period, when no program can still be reading it. No map-in-map entry is written
// per call: each such update makes the writer wait for a grace period (milliseconds).
package netguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
)

// Guard is the loaded object; one per node.
type Guard struct {
	// FailOpen says why cgroups below berm's root that no call owns keep their network
	// (no bpffs to share the owners through); empty: they are refused.
	FailOpen string

	objs  bpf.NetpolicyObjects
	calls *ebpf.Map
	gen   atomic.Uint64 // last generation handed out; 0 means none

	mu     sync.Mutex
	slots  []byte                  // berm_net_slots, mmapped: the generation in effect per slot
	owner  [tracer.MaxSlots]uint64 // cgroup whose policy a slot holds, 0: free
	closed bool

	gc gc

	root      string      // cgroup the programs are attached to once (AttachRoot)
	rootLinks []link.Link // nil: programs are attached per call
}

// New loads the programs and the per-call maps against the tracer's shared maps.
func New(shared tracer.Shared) (g *Guard, err error) {
	spec, err := bpf.LoadNetpolicy()
	if err != nil {
		return nil, fmt.Errorf("load netpolicy spec: %w", err)
	}
	g = &Guard{calls: shared.Calls}
	// Every agent of the node shares one map of the cgroups attached as calls, pinned in
	// bpffs: then a cgroup below berm's root that no agent owns can be refused. Without bpffs
	// each agent would see the others' calls as nobody's, so unowned cgroups are let through.
	pinDir, perr := ownedPinDir()
	if perr != nil {
		spec.Maps["berm_net_owned"].Pinning = ebpf.PinNone
		g.FailOpen = perr.Error()
	} else if err := spec.Variables["fail_closed"].Set(uint32(1)); err != nil {
		return nil, fmt.Errorf("set fail_closed: %w", err)
	}
	if err := shared.LoadPinned(spec, &g.objs, pinDir); err != nil {
		return nil, fmt.Errorf("load netpolicy objects: %w", err)
	}
	size := (tracer.MaxSlots*8 + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	g.slots, err = unix.Mmap(g.objs.BermNetSlots.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		g.objs.Close()
		return nil, fmt.Errorf("map berm_net_slots: %w", err)
	}
	g.gc.start(g)
	return g, nil
}

// Close unloads the programs and maps. Calls still attached keep their programs until their
// CallNet is closed (links hold references).
func (g *Guard) Close() error {
	var errs []error
	for _, l := range g.rootLinks {
		errs = append(errs, l.Close())
	}
	g.rootLinks = nil
	errs = append(errs, g.gc.stop())
	g.mu.Lock()
	if g.slots != nil {
		errs = append(errs, unix.Munmap(g.slots))
		g.slots = nil
	}
	// The owners map outlives this agent (pinned): what it owned goes with it.
	for _, id := range g.owner {
		if id != 0 {
			_ = g.objs.BermNetOwned.Delete(id)
		}
	}
	g.closed = true
	g.mu.Unlock()
	return errors.Join(append(errs, g.objs.Close())...)
}

type hook struct {
	name   string
	prog   *ebpf.Program
	attach ebpf.AttachType
}

func (g *Guard) hooks() []hook {
	return []hook{
		{"connect4", g.objs.BermConnect4, ebpf.AttachCGroupInet4Connect},
		{"connect6", g.objs.BermConnect6, ebpf.AttachCGroupInet6Connect},
		{"sendmsg4", g.objs.BermSendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", g.objs.BermSendmsg6, ebpf.AttachCGroupUDP6Sendmsg},
		{"sock_create", g.objs.BermSockCreate, ebpf.AttachCGroupInetSockCreate},
		{"recvmsg4", g.objs.BermDnsRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg},
		{"recvmsg6", g.objs.BermDnsRecvmsg6, ebpf.AttachCGroupUDP6Recvmsg},
		{"getpeername4", g.objs.BermDnsGetpeername4, ebpf.AttachCgroupInet4GetPeername},
		{"getpeername6", g.objs.BermDnsGetpeername6, ebpf.AttachCgroupInet6GetPeername},
	}
}

func attachAll(dir string, hooks []hook) ([]link.Link, error) {
	var links []link.Link
	for _, h := range hooks {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: h.attach, Program: h.prog})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, fmt.Errorf("attach %s to %s: %w", h.name, dir, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// AttachRoot attaches the programs once to the cgroup under which every call's cgroup is
// made: each call then inherits them (effective programs of a cgroup include its ancestors'),
// and Attach for a call below root only installs the call's maps. Attaching and detaching
// cgroup programs per call costs milliseconds; map updates cost microseconds. Programs judge
// only cgroups registered with this agent's tracer and allow the rest, so several agents can
// attach to the same root side by side.
func (g *Guard) AttachRoot(dir string) error {
	if g.rootLinks != nil {
		return fmt.Errorf("attach network programs to %s: already attached to %s", dir, g.root)
	}
	links, err := attachAll(dir, g.hooks())
	if err != nil {
		return err
	}
	g.root, g.rootLinks = filepath.Clean(dir), links
	return nil
}

func (g *Guard) underRoot(dir string) bool {
	return g.rootLinks != nil && strings.HasPrefix(filepath.Clean(dir), g.root+"/")
}

// CallNet is one call's attached programs and installed policy.
type CallNet struct {
	g        *Guard
	cgroupID uint64
	slot     uint32

	mu     sync.Mutex
	held   bool    // this CallNet holds the slot
	owned  bool    // this CallNet put the cgroup in berm_net_owned
	cur    version // the version in effect; gen 0 until installed
	links  []link.Link
	closed bool

	resolver bool                               // berm_dns_calls holds the call (dns.go)
	port     uint16                             // its resolver port in berm_dns_ports
	pins     map[bpf.WireBermDnsPinKey]struct{} // its pinned addresses in berm_dns_pins

	injectPort  uint16                             // its injecting egress port in berm_dns_ports (inject.go)
	injectRules map[uint32]bool                    // the domain rules of injected credentials' hosts
	injectKeys  map[bpf.WireBermInjectKey]struct{} // its redirections in berm_inject_dsts
}

// version is one installed policy: what the cleaner deletes once it is out of effect.
type version struct {
	gen  uint64
	keys []bpf.WireBermNetKey
}

// Attach installs pol for the call in cgroupDir (cgroup v2 id cgroupID) and, unless the
// programs are attached at a root above it, attaches the programs to that cgroup. The cgroup
// must be registered with the tracer first, with the same audit setting: the programs judge
// registered cgroups only, so attaching to an unregistered one would enforce nothing. The
// policy lives in the call's slot of that registration.
func (g *Guard) Attach(cgroupDir string, cgroupID uint64, pol *policy.NetPolicy, audit bool) (_ *CallNet, err error) {
	if pol == nil {
		return nil, fmt.Errorf("attach network policy to %s: no policy", cgroupDir)
	}
	if err := checkCgroup(cgroupDir, cgroupID); err != nil {
		return nil, fmt.Errorf("attach network policy to %s: %w", cgroupDir, err)
	}
	var cfg bpf.WireBermCallCfg
	if err := g.calls.Lookup(cgroupID, &cfg); err != nil {
		return nil, fmt.Errorf("attach network policy to %s: cgroup %d is not registered with the tracer, nothing would be judged: %w", cgroupDir, cgroupID, err)
	}
	if registered := cfg.Flags&tracer.CallAudit != 0; registered != audit {
		return nil, fmt.Errorf("attach network policy to %s: audit=%v but the tracer registered cgroup %d with audit=%v", cgroupDir, audit, cgroupID, registered)
	}
	if cfg.Slot >= tracer.MaxSlots {
		return nil, fmt.Errorf("attach network policy to %s: slot %d out of range", cgroupDir, cfg.Slot)
	}

	cn := &CallNet{g: g, cgroupID: cgroupID, slot: cfg.Slot}
	g.mu.Lock()
	if other := g.owner[cn.slot]; other != 0 {
		g.mu.Unlock()
		return nil, fmt.Errorf("attach network policy to %s: slot %d holds the policy of cgroup %d", cgroupDir, cn.slot, other)
	}
	g.owner[cn.slot], cn.held = cgroupID, true
	g.mu.Unlock()
	defer func() {
		if err != nil {
			cn.Close()
		}
	}()
	if err := g.objs.BermNetOwned.Update(cgroupID, uint32(os.Getpid()), ebpf.UpdateAny); err != nil {
		return nil, fmt.Errorf("attach network policy to %s: own cgroup %d: %w", cgroupDir, cgroupID, err)
	}
	cn.owned = true

	v, err := g.install(cgroupID, pol)
	if err != nil {
		return nil, fmt.Errorf("attach network policy to %s: %w", cgroupDir, err)
	}
	g.publish(cn.slot, v.gen)
	cn.cur = v
	if g.underRoot(cgroupDir) {
		return cn, nil // the programs attached at the root judge it already
	}
	if cn.links, err = attachAll(cgroupDir, g.hooks()); err != nil {
		return nil, err
	}
	return cn, nil
}

// checkCgroup makes sure the directory is the cgroup the id names: programs attached to one
// cgroup and a policy keyed by another would deny that call everything.
func checkCgroup(dir string, id uint64) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat cgroup: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Ino != id {
		return fmt.Errorf("cgroup directory is not cgroup %d", id)
	}
	return nil
}

// install writes pol as a new version for cgroupID, not yet in effect for any call. When the
// maps are full of versions awaiting deletion it waits for the cleaner once and tries again.
func (g *Guard) install(cgroupID uint64, pol *policy.NetPolicy) (version, error) {
	v, err := g.tryInstall(cgroupID, pol)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
		g.gc.flush()
		v, err = g.tryInstall(cgroupID, pol)
	}
	return v, err
}

func (g *Guard) tryInstall(cgroupID uint64, pol *policy.NetPolicy) (version, error) {
	v := version{gen: g.gen.Add(1)}
	entries, err := encodeTrie(pol, v.gen)
	if err != nil {
		return version{}, err
	}
	socks, err := encodeSockets(pol)
	if err != nil {
		return version{}, err
	}
	n, err := g.fill(entries.keys, entries.vals)
	v.keys = entries.keys[:n]
	if err != nil {
		g.gc.discard(v)
		return version{}, fmt.Errorf("write policy prefixes: %w", err)
	}
	rec := bpf.WireBermNetGen{CgroupId: cgroupID, Socks: socks}
	if err := g.objs.BermNetGens.Update(v.gen, &rec, ebpf.UpdateNoExist); err != nil {
		g.gc.discard(v)
		return version{}, fmt.Errorf("write policy record: %w", err)
	}
	return v, nil
}

// fill writes the prefixes in one batch where the kernel has batch operations on tries,
// and returns how many it wrote.
func (g *Guard) fill(keys []bpf.WireBermNetKey, vals []bpf.WireBermNetPrefix) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	// the kernel's generic batch takes no NOEXIST flag; the generation makes the keys new
	n, err := g.objs.BermNetPolicy.BatchUpdate(keys, vals, nil)
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return n, err
	}
	for i := range keys {
		if err := g.objs.BermNetPolicy.Update(&keys[i], &vals[i], ebpf.UpdateNoExist); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}

// publish puts version gen in effect for the call in slot (0: none) in one atomic store: the
// programs read the word once per decision. The version's entries are written before (the
// kernel's map updates are ordered before this store), so no decision sees a partial one.
func (g *Guard) publish(slot uint32, gen uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.slots == nil {
		return // the Guard is closed: its maps are gone
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&g.slots[slot*8])), gen)
}

// Update replaces the call's policy while it runs: the new version is written beside the old
// one and put in effect by one atomic store of the slot's generation, so each decision uses
// the old version or the new one, never a mix. The old version is deleted in the background
// once no program can still be reading it.
func (cn *CallNet) Update(pol *policy.NetPolicy) error {
	if pol == nil {
		return fmt.Errorf("update network policy of cgroup %d: no policy", cn.cgroupID)
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return fmt.Errorf("update network policy of cgroup %d: closed", cn.cgroupID)
	}
	v, err := cn.g.install(cn.cgroupID, pol)
	if err != nil {
		return fmt.Errorf("update network policy of cgroup %d: %w", cn.cgroupID, err)
	}
	cn.g.publish(cn.slot, v.gen)
	old := cn.cur
	cn.cur = v
	cn.g.gc.discard(old)
	return nil
}

// Close detaches the programs and removes the call's policy: from now on the slot has none,
// and its entries are deleted in the background.
func (cn *CallNet) Close() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return nil
	}
	cn.closed = true
	var errs []error
	for _, l := range cn.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach from cgroup %d: %w", cn.cgroupID, err))
		}
	}
	cn.links = nil
	errs = append(errs, cn.closeDNS(), cn.closeInject())
	// only what this CallNet installed: a failed second Attach must not remove the first's
	if cn.cur.gen != 0 {
		cn.g.publish(cn.slot, 0)
		cn.g.gc.discard(cn.cur)
		cn.cur = version{}
	}
	if cn.held {
		cn.g.mu.Lock()
		cn.g.owner[cn.slot] = 0
		cn.g.mu.Unlock()
		cn.held = false
	}
	if cn.owned {
		cn.g.mu.Lock()
		if !cn.g.closed { // a closed Guard disowned its calls already
			if err := cn.g.objs.BermNetOwned.Delete(cn.cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("disown cgroup %d: %w", cn.cgroupID, err))
			}
		}
		cn.g.mu.Unlock()
		cn.owned = false
	}
	return errors.Join(errs...)
}

// OwnedPinDir is where the map of cgroups owned by berm agents is pinned.
const OwnedPinDir = "/sys/fs/bpf/berm"

// ownedPinDir makes the pin directory on bpffs, or says why there is none.
func ownedPinDir() (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(OwnedPinDir), &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		return "", fmt.Errorf("no bpffs at %s (mount -t bpf bpf %s): cgroups below berm's root that no call owns keep their network", filepath.Dir(OwnedPinDir), filepath.Dir(OwnedPinDir))
	}
	if err := os.MkdirAll(OwnedPinDir, 0o700); err != nil {
		return "", fmt.Errorf("pin directory: %w", err)
	}
	return OwnedPinDir, nil
}
