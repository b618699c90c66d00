package dnsguard

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
)

// pinTable is one call's pinned addresses as written to the kernel: per address, one entry
// per domain-rule port range, each with its own expiry.
type pinTable struct {
	pins  Pinner
	grace time.Duration

	mu     sync.Mutex
	byAddr map[netip.Addr][]netguard.PinRule
}

// add pins addr for the rule's port ranges until until+grace; a later answer for the same
// address and rule moves the expiry (never earlier).
func (t *pinTable) add(addr netip.Addr, rule *policy.DomainRule, until time.Time) error {
	until = until.Add(t.grace)
	t.mu.Lock()
	defer t.mu.Unlock()
	list := slices.Clone(t.byAddr[addr])
	for _, pr := range rule.Ports {
		i := slices.IndexFunc(list, func(e netguard.PinRule) bool {
			return e.Rule == rule.RuleID && e.PortLo == pr.Lo && e.PortHi == pr.Hi && e.Proto == rule.Proto
		})
		if i >= 0 {
			if until.After(list[i].Until) {
				list[i].Until = until
			}
			continue
		}
		list = append(list, netguard.PinRule{Until: until, Rule: rule.RuleID, PortLo: pr.Lo, PortHi: pr.Hi, Proto: rule.Proto})
	}
	if len(list) > netguard.MaxPinRules {
		// the oldest-expiring entries give way: closing a port is the safe side
		slices.SortFunc(list, func(a, b netguard.PinRule) int { return b.Until.Compare(a.Until) })
		list = list[:netguard.MaxPinRules]
	}
	if err := t.pins.Pin(addr, list); err != nil {
		return err
	}
	t.byAddr[addr] = list
	return nil
}

// expire drops what expired by now from the kernel's map (the hooks refuse it already).
func (t *pinTable) expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, list := range t.byAddr {
		kept := slices.DeleteFunc(slices.Clone(list), func(e netguard.PinRule) bool { return !now.Before(e.Until) })
		if len(kept) == len(list) {
			continue
		}
		if err := t.pins.Pin(addr, kept); err != nil {
			continue // tried again next round; the expiry in the kernel holds meanwhile
		}
		if len(kept) == 0 {
			delete(t.byAddr, addr)
		} else {
			t.byAddr[addr] = kept
		}
	}
}

// count is how many addresses are pinned.
func (t *pinTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byAddr)
}
