package sandboxer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// Pool keeps sandboxes started ahead of their calls, per tenant: cgroups created (the v1 joins
// of hybrid hosts cost milliseconds of RCU waits each), namespaces made and the init running.
// What depends on the call (its caps, root, Landlock, seccomp, identity) is applied when a
// call claims one, before its tool starts; each sandbox runs exactly one call and is thrown
// away with it. Only calls without network (a fresh network namespace) are served warm.
type Pool struct {
	Init string
	// Size is how many warm sandboxes each tenant keeps; MaxTenants bounds the tenants that
	// have any (the least recently used lose theirs).
	Size, MaxTenants int
	// MaxAge retires a warm sandbox: its mount namespace is a copy of the host's from when it
	// started, and host mounts made since do not show in it.
	MaxAge time.Duration
	Log    *slog.Logger

	mu      sync.Mutex
	layout  *cgroup.Layout
	idle    map[string][]warm
	filling map[string]bool
	used    map[string]time.Time
	plans   map[string]*sandboxinit.RootPlan // the root of each tenant's last call
	owners  map[string][2]uint32             // the workspace owner of each tenant's last call
	pending int                              // refills scheduled, not started yet
	closed  bool
	stop    chan struct{} // ends renew
	wg      sync.WaitGroup

	// Warm and Cold count the calls launched each way.
	Warm, Cold atomic.Uint64
}

type warm struct {
	s       *sandbox
	started time.Time
}

// poolLimits are a warm sandbox's caps until a call claims it and sets its own.
var poolLimits = func() cgroup.Limits {
	l := policy.StrictLimits()
	return cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}
}()

// NewPool starts a pool and warms the given tenants.
func NewPool(initPath string, size int, log *slog.Logger, tenants ...string) (*Pool, error) {
	return newPool(initPath, size, time.Minute, log, tenants...)
}

func newPool(initPath string, size int, maxAge time.Duration, log *slog.Logger, tenants ...string) (*Pool, error) {
	layout, err := hostLayout()
	if err != nil {
		return nil, err
	}
	p := &Pool{
		Init: initPath, Size: size, MaxTenants: 16, MaxAge: maxAge, Log: log,
		layout: layout, idle: map[string][]warm{}, filling: map[string]bool{}, used: map[string]time.Time{}, plans: map[string]*sandboxinit.RootPlan{},
		owners: map[string][2]uint32{},
	}
	for _, t := range tenants {
		p.refill(t)
	}
	if size > 0 {
		p.stop = make(chan struct{})
		p.wg.Add(1)
		go p.renew()
	}
	return p, nil
}

// renew replaces warm sandboxes that reach MaxAge, so that a call after a quiet spell still
// finds a fresh one instead of starting its own.
func (p *Pool) renew() {
	defer p.wg.Done()
	tick := time.NewTicker(p.MaxAge / 4)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		var stale []string
		p.mu.Lock()
		for tenant, ws := range p.idle {
			fresh := ws[:0]
			for _, w := range ws {
				if time.Since(w.started) >= p.MaxAge {
					p.retire(w.s)
					continue
				}
				fresh = append(fresh, w)
			}
			if len(fresh) < len(ws) {
				stale = append(stale, tenant)
			}
			p.idle[tenant] = fresh
		}
		p.mu.Unlock()
		for _, t := range stale {
			p.refill(t)
		}
	}
}

// take claims a warm sandbox of tenant, or returns nil. The call's root and its workspace's
// owner are remembered: the tenant's next warm sandboxes prepare them ahead.
func (p *Pool) take(tenant string, root sandboxinit.RootPlan, ownerUID, ownerGID uint32) *sandbox {
	if p == nil || p.Size <= 0 {
		return nil
	}
	s, otherRoot := p.claim(tenant, root, ownerUID, ownerGID)
	if s == nil && otherRoot {
		// The tenant's sandboxes were inside another root: the call runs cold, and the
		// refill prepares its root for the next.
		p.refillAfter(tenant)
	}
	return s
}

func (p *Pool) claim(tenant string, root sandboxinit.RootPlan, ownerUID, ownerGID uint32) (_ *sandbox, otherRoot bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used[tenant] = time.Now()
	p.plans[tenant] = &sandboxinit.RootPlan{Binds: root.Binds, Devices: root.Devices}
	p.owners[tenant] = [2]uint32{ownerUID, ownerGID}
	for len(p.idle[tenant]) > 0 {
		w := p.idle[tenant][0]
		p.idle[tenant] = p.idle[tenant][1:]
		// An init that prepared a root is inside it: a call with another root runs cold.
		// One started before the tenant's first call prepared none and builds the call's.
		if w.s.prepared != nil && !sandboxinit.SamePlan(w.s.prepared, &root) {
			otherRoot = true
			p.retire(w.s)
			continue
		}
		if alive, _ := cgroup.Populated(w.s.cg.V2); alive && time.Since(w.started) < p.MaxAge {
			return w.s, false
		}
		p.retire(w.s)
	}
	return nil, otherRoot
}

// retire discards a sandbox in the background.
func (p *Pool) retire(s *sandbox) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := s.discard(); err != nil {
			p.Log.Warn("discard warm sandbox", "err", err)
		}
	}()
}

// refillDelay lets the caller that just got its reply go on first: starting sandboxes
// competes with it for the CPU.
const refillDelay = 10 * time.Millisecond

// refillAfter refills tenant's warm sandboxes shortly.
func (p *Pool) refillAfter(tenant string) {
	if p == nil || p.Size <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.wg.Add(1)
	p.pending++
	time.AfterFunc(refillDelay, func() {
		defer p.wg.Done()
		p.refill(tenant)
		p.mu.Lock()
		p.pending--
		p.mu.Unlock()
	})
}

// refill starts sandboxes for tenant until it has Size, one filler per tenant at a time.
func (p *Pool) refill(tenant string) {
	p.mu.Lock()
	if p.closed || p.filling[tenant] {
		p.mu.Unlock()
		return
	}
	p.filling[tenant] = true
	p.used[tenant] = time.Now()
	p.evictLocked()
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			p.filling[tenant] = false
			p.mu.Unlock()
		}()
		for {
			p.mu.Lock()
			if p.closed || len(p.idle[tenant]) >= p.Size {
				p.mu.Unlock()
				return
			}
			plan := p.plans[tenant]
			owner, known := p.owners[tenant]
			p.mu.Unlock()
			s, err := startSandbox(p.layout, p.Init, tenant, warmName(), poolLimits, true, plan)
			if err != nil {
				p.Log.Warn("start warm sandbox", "tenant", tenant, "err", err)
				return
			}
			if known {
				// The workspace's idmap for the owner the tenant's calls had (a process to
				// start): made now, not on the next call's way.
				if err := s.prepareIdmap(owner[0], owner[1]); err != nil {
					p.Log.Warn("prepare warm sandbox's workspace idmap", "tenant", tenant, "err", err)
				}
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				_ = s.discard()
				return
			}
			p.idle[tenant] = append(p.idle[tenant], warm{s, time.Now()})
			p.mu.Unlock()
		}
	}()
}

// evictLocked drops the warm sandboxes of the least recently used tenants beyond MaxTenants.
func (p *Pool) evictLocked() {
	for len(p.used) > p.MaxTenants {
		oldest, at := "", time.Time{}
		for t, u := range p.used {
			if oldest == "" || u.Before(at) {
				oldest, at = t, u
			}
		}
		for _, w := range p.idle[oldest] {
			p.retire(w.s)
		}
		delete(p.idle, oldest)
		delete(p.used, oldest)
		delete(p.plans, oldest)
		delete(p.owners, oldest)
	}
}

// Starting says whether sandboxes are being started: a benchmark measures a launch on a
// machine that is not also refilling.
func (p *Pool) Starting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending > 0 {
		return true
	}
	for _, f := range p.filling {
		if f {
			return true
		}
	}
	return false
}

// Idle is the number of warm sandboxes ready.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ws := range p.idle {
		n += len(ws)
	}
	return n
}

// Close discards every warm sandbox.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = map[string][]warm{}
	p.mu.Unlock()
	if p.stop != nil {
		close(p.stop)
	}
	for _, ws := range idle {
		for _, w := range ws {
			p.retire(w.s)
		}
	}
	p.wg.Wait()
	return nil
}

func warmName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("warm-%s", hex.EncodeToString(b))
}
