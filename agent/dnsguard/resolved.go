package dnsguard

import (
	"net/netip"
	"sync"
)

// maxResolved bounds the addresses a call's record of answers keeps: a tool resolving
// without end must not grow the agent without end (past it, new answers are not kept and a
// connect to them reads as unresolved: a false alert, never a missed one).
const maxResolved = 1 << 16

// Resolved is every address the resolver ever answered for a call, expired or not: what the
// detection rules ask about a connect (event.Connect.Unresolved).
type Resolved struct {
	mu  sync.Mutex
	set map[netip.Addr]struct{}
}

func (r *Resolved) add(a netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = map[netip.Addr]struct{}{}
	}
	if len(r.set) < maxResolved {
		r.set[a.Unmap()] = struct{}{}
	}
}

// Has says whether addr was ever answered for the call.
func (r *Resolved) Has(addr netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.set[addr.Unmap()]
	return ok
}
