package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/bpf"
)

// MaxPinRules is how many port ranges one pinned address carries for a call (the ranges of
// the domain rules it was answered for): bpf/lib/berm.h BERM_DNS_PIN_RULES.
const MaxPinRules = len(bpf.WireBermDnsPin{}.R)

// PinRule opens a domain rule's port range at a resolved address until Until. The kernel
// compares Until (as CLOCK_MONOTONIC) itself: a pin the cleaner has not removed yet is void.
type PinRule struct {
	Until  time.Time
	Rule   uint32
	PortLo uint16
	PortHi uint16
	Proto  uint8
}

// SetResolver sends the call's port-53 traffic, UDP and TCP to any address, to port on the
// loopback addresses (127.0.0.1 and ::1), where berm's resolver answers for this call only.
func (cn *CallNet) SetResolver(port uint16) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return fmt.Errorf("set resolver of cgroup %d: closed", cn.cgroupID)
	}
	v := bpf.WireBermDnsCall{Port: port, ResolverIp6: netip.IPv6Loopback().As16()}
	lo := netip.MustParseAddr("127.0.0.1").As4()
	v.ResolverIp4 = uint32(lo[0]) | uint32(lo[1])<<8 | uint32(lo[2])<<16 | uint32(lo[3])<<24 // network order in memory
	if err := cn.g.objs.BermDnsCalls.Update(cn.cgroupID, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set resolver of cgroup %d: %w", cn.cgroupID, err)
	}
	cn.resolver = true
	// the port is this call's alone: the hooks refuse it to every other call
	if err := cn.g.objs.BermDnsPorts.Update(uint32(port), cn.cgroupID, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set resolver of cgroup %d: own port %d: %w", cn.cgroupID, port, err)
	}
	cn.port = port
	return nil
}

// ClearResolver stops sending the call's port-53 traffic to berm's resolver and removes its
// pins: its DNS is judged by its CIDR rules again (a reload left its policy without domains).
func (cn *CallNet) ClearResolver() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return nil
	}
	return cn.closeDNS()
}

// Pin opens rules at addr for the call, replacing what was pinned there; no rules unpins it.
// Other calls' pins are keyed by their own cgroups and never open anything for this one.
func (cn *CallNet) Pin(addr netip.Addr, rules []PinRule) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return fmt.Errorf("pin %s for cgroup %d: closed", addr, cn.cgroupID)
	}
	// As16 gives IPv4 as IPv4-mapped, as the hooks key it
	key := bpf.WireBermDnsPinKey{CgroupId: cn.cgroupID, Addr: addr.As16()}
	if len(rules) == 0 {
		delete(cn.pins, key)
		if err := cn.g.objs.BermDnsPins.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("unpin %s for cgroup %d: %w", addr, cn.cgroupID, err)
		}
		return nil
	}
	if len(rules) > MaxPinRules {
		return fmt.Errorf("pin %s for cgroup %d: %d port ranges, at most %d", addr, cn.cgroupID, len(rules), MaxPinRules)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("pin %s: monotonic clock: %w", addr, err)
	}
	mono, now := ts.Nano(), time.Now()
	v := bpf.WireBermDnsPin{N: uint32(len(rules))}
	for i, r := range rules {
		left := r.Until.Sub(now)
		if left < 0 {
			left = 0
		}
		v.R[i] = bpf.WireBermDnsPinRule{ExpiresNs: uint64(mono) + uint64(left), Rule: r.Rule, PortLo: r.PortLo, PortHi: r.PortHi, Proto: r.Proto}
	}
	// the move to the injecting egress first: an address open before it is moved would let
	// a racing connect past it
	if err := cn.moveInjected(addr, rules); err != nil {
		return err
	}
	if err := cn.g.objs.BermDnsPins.Update(&key, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("pin %s for cgroup %d: %w", addr, cn.cgroupID, err)
	}
	if cn.pins == nil {
		cn.pins = map[bpf.WireBermDnsPinKey]struct{}{}
	}
	cn.pins[key] = struct{}{}
	return nil
}

// closeDNS removes the call's resolver redirection and every pin it has. Called with cn.mu held.
func (cn *CallNet) closeDNS() error {
	var errs []error
	if cn.resolver {
		if err := cn.g.objs.BermDnsCalls.Delete(cn.cgroupID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("remove resolver of cgroup %d: %w", cn.cgroupID, err))
		}
		cn.resolver = false
	}
	if cn.port != 0 {
		if err := cn.g.objs.BermDnsPorts.Delete(uint32(cn.port)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("release resolver port %d of cgroup %d: %w", cn.port, cn.cgroupID, err))
		}
		cn.port = 0
	}
	for k := range cn.pins {
		if err := cn.g.objs.BermDnsPins.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("unpin for cgroup %d: %w", cn.cgroupID, err))
		}
	}
	cn.pins = nil
	return errors.Join(errs...)
}
