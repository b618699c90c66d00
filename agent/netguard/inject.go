package netguard

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/bermsec/berm/bpf"
)

// injectInspect is bpf/lib/berm.h's BERM_INJECT_INSPECT.
const injectInspect = 1

// Orig is where a connect the hooks moved to a call's injecting egress was going, as the
// kernel saw it (bpf/lib/inject.h).
type Orig struct {
	CgroupID  uint64
	Addr      netip.AddrPort // IPv4 unmapped
	ProxyPort uint16
	// Inspect: not a credential host's address and port but another the call's policy lets
	// through, moved to be inspected for the placeholder (bpf BERM_INJECT_INSPECT).
	Inspect bool
}

// SetInject sends the call's TCP connects to the addresses its resolver pins for the rules in
// rules (an injected credential's hosts), on those rules' ports, to proxyPort on loopback: the
// call's own port of berm's injecting egress, which no other call may reach. Every other TCP
// connect of the call its policy lets through goes there too, marked to be inspected
// (Orig.Inspect). Addresses pinned before it are not moved: call it before the tool starts.
func (cn *CallNet) SetInject(proxyPort uint16, rules []uint32) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return fmt.Errorf("set injecting egress of cgroup %d: closed", cn.cgroupID)
	}
	if err := cn.g.objs.BermDnsPorts.Update(uint32(proxyPort), cn.cgroupID, ebpf.UpdateNoExist); err != nil {
		return fmt.Errorf("set injecting egress of cgroup %d: own port %d: %w", cn.cgroupID, proxyPort, err)
	}
	if err := cn.g.objs.BermInjectCalls.Update(cn.cgroupID, uint32(proxyPort), ebpf.UpdateAny); err != nil {
		_ = cn.g.objs.BermDnsPorts.Delete(uint32(proxyPort))
		return fmt.Errorf("set injecting egress of cgroup %d: inspect its connects: %w", cn.cgroupID, err)
	}
	cn.injectPort = proxyPort
	cn.injectRules = map[uint32]bool{}
	for _, r := range rules {
		cn.injectRules[r] = true
	}
	return nil
}

// SetInjectRules replaces the domain rules whose pins are moved to the call's injecting
// egress, for a hot-reloaded policy: its rule ids are the same hosts' under new numbers
// (another rule added before them shifts them). It returns the rules it replaced (to put them
// back when the reload fails). Redirections already written stay: they are the same hosts'.
func (cn *CallNet) SetInjectRules(rules []uint32) (prev []uint32) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for r := range cn.injectRules {
		prev = append(prev, r)
	}
	if cn.injectPort == 0 {
		return prev
	}
	cn.injectRules = map[uint32]bool{}
	for _, r := range rules {
		cn.injectRules[r] = true
	}
	return prev
}

// moveInjected writes the redirections of addr for the injecting rules among rules. Called
// with cn.mu held, by Pin.
func (cn *CallNet) moveInjected(addr netip.Addr, rules []PinRule) error {
	if cn.injectPort == 0 {
		return nil
	}
	for _, r := range rules {
		if !cn.injectRules[r.Rule] || r.Proto != 6 || r.PortHi-r.PortLo > 16 {
			continue
		}
		for p := uint32(r.PortLo); p <= uint32(r.PortHi); p++ {
			k := bpf.WireBermInjectKey{CgroupId: cn.cgroupID, Addr: addr.As16(), Port: uint16(p)}
			if _, ok := cn.injectKeys[k]; ok {
				continue
			}
			if err := cn.g.objs.BermInjectDsts.Update(&k, uint32(cn.injectPort), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("move %s:%d of cgroup %d to its injecting egress: %w", addr, p, cn.cgroupID, err)
			}
			if cn.injectKeys == nil {
				cn.injectKeys = map[bpf.WireBermInjectKey]struct{}{}
			}
			cn.injectKeys[k] = struct{}{}
		}
	}
	return nil
}

// InjectOrig is where the tool's socket with this cookie was going when the hooks moved its
// connect. The entry stays (an LRU map): the socket's getpeername shows it to the tool.
func (cn *CallNet) InjectOrig(cookie uint64) (Orig, error) {
	var v bpf.WireBermInjectOrig
	if err := cn.g.objs.BermInjectOrig.Lookup(cookie, &v); err != nil {
		return Orig{}, fmt.Errorf("socket %d: no connect moved: %w", cookie, err)
	}
	a := netip.AddrFrom16(v.Addr).Unmap()
	return Orig{CgroupID: v.CgroupId, Addr: netip.AddrPortFrom(a, v.Port), ProxyPort: v.ProxyPort, Inspect: v.Flags&injectInspect != 0}, nil
}

// closeInject removes the call's redirections and releases its proxy port. Called with cn.mu held.
func (cn *CallNet) closeInject() error {
	var errs []error
	for k := range cn.injectKeys {
		if err := cn.g.objs.BermInjectDsts.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("remove injecting redirection of cgroup %d: %w", cn.cgroupID, err))
		}
	}
	cn.injectKeys = nil
	if cn.injectPort != 0 {
		if err := cn.g.objs.BermInjectCalls.Delete(cn.cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("stop inspecting the connects of cgroup %d: %w", cn.cgroupID, err))
		}
		if err := cn.g.objs.BermDnsPorts.Delete(uint32(cn.injectPort)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("release injecting egress port %d of cgroup %d: %w", cn.injectPort, cn.cgroupID, err))
		}
		cn.injectPort = 0
	}
	return errors.Join(errs...)
}
