// Package netguard enforces a call's egress policy in the kernel: cgroup sock programs
// (bpf/netpolicy.bpf.c) attached to the call's own cgroup judge connect, unconnected UDP sends
// and socket() against per-call maps, and report every denial in the shared event ring.
package netguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/sandboxer/policy"
)

// Shared are the maps of lib/maps.h, created by the tracer (tracer.Shared): the programs find
// calls, write events and count drops in the same maps as every other berm object.
type Shared struct {
	Calls, Events, Drops *ebpf.Map
	// WakeupBytes is the ring's wake-up threshold (tracer.Config.WakeupBytes); 0 keeps the
	// object's default.
	WakeupBytes uint64
}

// Guard is the loaded object; one per node.
type Guard struct {
	objs  bpf.NetpolicyObjects
	trie  *ebpf.MapSpec // inner map template: every trie must match it
	calls *ebpf.Map

	root      string      // cgroup the programs are attached to once (AttachRoot)
	rootLinks []link.Link // nil: programs are attached per call
}

// New loads the programs and the per-call maps, sharing the tracer's maps.
func New(shared Shared) (g *Guard, err error) {
	if shared.Calls == nil || shared.Events == nil || shared.Drops == nil {
		return nil, errors.New("load netpolicy: the shared calls, events and drops maps are required")
	}
	spec, err := bpf.LoadNetpolicy()
	if err != nil {
		return nil, fmt.Errorf("load netpolicy spec: %w", err)
	}
	if shared.WakeupBytes != 0 {
		if err := spec.Variables["wakeup_bytes"].Set(shared.WakeupBytes); err != nil {
			return nil, fmt.Errorf("set wakeup_bytes: %w", err)
		}
	}
	outer := spec.Maps["berm_net_policy"]
	if outer == nil || outer.InnerMap == nil {
		return nil, errors.New("load netpolicy spec: berm_net_policy has no inner map")
	}
	g = &Guard{trie: outer.InnerMap.Copy(), calls: shared.Calls}
	g.trie.Name = "berm_net_trie"
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"berm_calls":  shared.Calls,
		"berm_events": shared.Events,
		"berm_drops":  shared.Drops,
	}}
	// LoadAndAssign closes whatever it created when it fails part way.
	if err := spec.LoadAndAssign(&g.objs, opts); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			err = fmt.Errorf("%+v", ve)
		}
		return nil, fmt.Errorf("load netpolicy objects: %w", err)
	}
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

	mu     sync.Mutex
	trie   *ebpf.Map // the inner map in effect; nil until installed
	socks  bool      // the socket rules are installed
	links  []link.Link
	closed bool
}

// Attach installs pol for the call in cgroupDir (cgroup v2 id cgroupID) and attaches the
// programs to that cgroup. The cgroup must be registered with the tracer first, with the same
// audit setting: the programs judge registered cgroups only, so attaching to an unregistered
// one would enforce nothing.
func (g *Guard) Attach(cgroupDir string, cgroupID uint64, pol *policy.NetPolicy, audit bool) (_ *CallNet, err error) {
	if pol == nil {
		return nil, fmt.Errorf("attach network policy to %s: no policy", cgroupDir)
	}
	if err := checkCgroup(cgroupDir, cgroupID); err != nil {
		return nil, fmt.Errorf("attach network policy to %s: %w", cgroupDir, err)
	}
	var cfg bpf.NetpolicyBermCallCfg
	if err := g.calls.Lookup(cgroupID, &cfg); err != nil {
		return nil, fmt.Errorf("attach network policy to %s: cgroup %d is not registered with the tracer, nothing would be judged: %w", cgroupDir, cgroupID, err)
	}
	if registered := cfg.Flags&tracer.CallAudit != 0; registered != audit {
		return nil, fmt.Errorf("attach network policy to %s: audit=%v but the tracer registered cgroup %d with audit=%v", cgroupDir, audit, cgroupID, registered)
	}
	trie, socks, err := g.build(pol)
	if err != nil {
		return nil, fmt.Errorf("attach network policy to %s: %w", cgroupDir, err)
	}

	cn := &CallNet{g: g, cgroupID: cgroupID}
	defer func() {
		if err != nil {
			cn.Close()
		}
	}()
	if err := g.objs.BermNetPolicy.Update(cgroupID, trie, ebpf.UpdateNoExist); err != nil {
		trie.Close()
		return nil, fmt.Errorf("install network policy of cgroup %d: %w", cgroupID, err)
	}
	cn.trie = trie
	if err := g.objs.BermNetSockets.Update(cgroupID, &socks, ebpf.UpdateNoExist); err != nil {
		return nil, fmt.Errorf("install socket rules of cgroup %d: %w", cgroupID, err)
	}
	cn.socks = true
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

// build creates and fills a new trie for pol, not yet visible to any program.
func (g *Guard) build(pol *policy.NetPolicy) (*ebpf.Map, bpf.NetpolicyBermNetSocks, error) {
	entries, err := encodeTrie(pol)
	if err != nil {
		return nil, bpf.NetpolicyBermNetSocks{}, err
	}
	socks, err := encodeSockets(pol)
	if err != nil {
		return nil, socks, err
	}
	trie, err := ebpf.NewMap(g.trie)
	if err != nil {
		return nil, socks, fmt.Errorf("create policy trie: %w", err)
	}
	for _, e := range entries {
		if err := trie.Update(&e.key, &e.val, ebpf.UpdateNoExist); err != nil {
			trie.Close()
			return nil, socks, fmt.Errorf("fill policy trie: %w", err)
		}
	}
	return trie, socks, nil
}

// Update replaces the call's policy while it runs. The destination policy changes in one
// step (the call's trie is swapped in a single map update), as do the socket rules (one
// value); each decision reads one of the two, so none sees a mix of old and new.
func (cn *CallNet) Update(pol *policy.NetPolicy) error {
	if pol == nil {
		return fmt.Errorf("update network policy of cgroup %d: no policy", cn.cgroupID)
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return fmt.Errorf("update network policy of cgroup %d: closed", cn.cgroupID)
	}
	trie, socks, err := cn.g.build(pol)
	if err != nil {
		return fmt.Errorf("update network policy of cgroup %d: %w", cn.cgroupID, err)
	}
	if err := cn.g.objs.BermNetPolicy.Update(cn.cgroupID, trie, ebpf.UpdateExist); err != nil {
		trie.Close()
		return fmt.Errorf("swap network policy of cgroup %d: %w", cn.cgroupID, err)
	}
	// The kernel holds the old trie until programs running on it are done (RCU).
	cn.trie.Close()
	cn.trie = trie
	if err := cn.g.objs.BermNetSockets.Update(cn.cgroupID, &socks, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("swap socket rules of cgroup %d: %w", cn.cgroupID, err)
	}
	return nil
}

// Close detaches the programs and removes the call's policy.
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
	// only what this CallNet installed: a failed second Attach must not remove the first's
	if cn.socks {
		if err := cn.g.objs.BermNetSockets.Delete(cn.cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("remove socket rules of cgroup %d: %w", cn.cgroupID, err))
		}
	}
	if cn.trie != nil {
		if err := cn.g.objs.BermNetPolicy.Delete(cn.cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("remove network policy of cgroup %d: %w", cn.cgroupID, err))
		}
		errs = append(errs, cn.trie.Close())
		cn.trie = nil
	}
	return errors.Join(errs...)
}
