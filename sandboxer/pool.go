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
//
// How many a tenant keeps follows its calls: Size at least, one more each time a call of its
// found none (back-to-back calls, a burst), up to MaxPerTenant, and one less each MaxAge/4
// in which it claimed fewer than it kept. MaxTotal bounds the warm sandboxes of the node,
// whatever its tenants ask: a tenant that exhausts its own cannot take another's.
type Pool struct {
	Init string
	// Size is how many warm sandboxes each tenant keeps at least; MaxTenants bounds the
	// tenants that have any (the least recently used lose theirs).
	Size, MaxTenants int
	// MaxPerTenant bounds what one tenant's demand grows its warm sandboxes to; MaxTotal
	// bounds the node's (started and starting).
	MaxPerTenant, MaxTotal int
	// MaxAge retires a warm sandbox: its mount namespace is a copy of the host's from when it
	// started, and host mounts made since do not show in it.
	MaxAge time.Duration
	Log    *slog.Logger

	mu       sync.Mutex
	layout   *cgroup.Layout
	idle     map[string][]warm
	starting map[string]int // sandboxes being started per tenant
	target   map[string]int // what each tenant keeps now (Size..MaxPerTenant)
	claims   map[string]int // warm claims per tenant since renew last looked
	used     map[string]time.Time
	plans    map[string]*sandboxinit.RootPlan // the root of each tenant's last call
	owners   map[string][2]uint32             // the workspace owner of each tenant's last call
	pending  int                              // refills scheduled, not started yet
	reaping  bool                             // a look for stale cgroups runs or waits
	closed   bool
	stop     chan struct{} // ends renew and the stale look's pause
	wg       sync.WaitGroup

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
		MaxPerTenant: max(size, DefaultMaxPerTenant), MaxTotal: max(size, DefaultMaxTotal),
		layout: layout, idle: map[string][]warm{}, starting: map[string]int{}, target: map[string]int{}, claims: map[string]int{},
		used: map[string]time.Time{}, plans: map[string]*sandboxinit.RootPlan{}, owners: map[string][2]uint32{},
	}
	for _, t := range tenants {
		p.refill(t)
	}
	p.stop = make(chan struct{})
	if size > 0 {
		p.wg.Add(1)
		go p.renew()
	}
	return p, nil
}

// The bounds a tenant's demand grows its warm sandboxes within (bermd --warm-max-tenant,
// --warm-max). A warm sandbox holds an init process (≈ 10 MB resident), its cgroups and its
// namespaces.
const (
	DefaultMaxPerTenant = 8
	DefaultMaxTotal     = 32
)

// fillers is how many sandboxes one tenant's refill starts at once: a burst's pool fills in
// parallel, as far as two cores go.
const fillers = 2

// renew replaces warm sandboxes that reach MaxAge, so that a call after a quiet spell still
// finds a fresh one instead of starting its own, and lowers the targets of tenants whose
// demand fell.
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
		for tenant := range p.target {
			p.target[tenant] = nextTarget(p.target[tenant], p.Size, p.claims[tenant])
			p.claims[tenant] = 0
			for len(p.idle[tenant]) > p.target[tenant] {
				last := len(p.idle[tenant]) - 1
				p.retire(p.idle[tenant][last].s)
				p.idle[tenant] = p.idle[tenant][:last]
			}
		}
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
func (p *Pool) take(tenant string, root sandboxinit.RootPlan, ownerUID, ownerGID uint32, tl *Timeline) *sandbox {
	if p == nil || p.Size <= 0 {
		return nil
	}
	s, otherRoot, hurry := p.claim(tenant, root, ownerUID, ownerGID, tl)
	defer tl.Mark("pool refill scheduled")
	switch {
	case s == nil && otherRoot:
		// The tenant's sandboxes were inside another root: the call runs cold, and the
		// refill prepares its root for the next.
		p.refillAfter(tenant)
	case s == nil, hurry:
		// None was there (the target grew), or this was the last of a tenant whose calls
		// come faster than its floor: the next call of a back-to-back run or a burst is
		// already on its way, so the refill starts now. A tenant at its floor refills after
		// the call's reply instead (refillAfter), not competing with the call for the CPU.
		p.refill(tenant)
	}
	return s
}

// grow is a tenant's target after a call of it found no warm sandbox.
func grow(target, size, perTenant int) int {
	return min(max(target, size)+1, perTenant)
}

// nextTarget is a tenant's target after a period in which it claimed claims warm sandboxes:
// one less when it claimed fewer than it kept, never under size.
func nextTarget(target, size, claims int) int {
	if claims < target && target > size {
		return target - 1
	}
	return max(target, size)
}

func (p *Pool) claim(tenant string, root sandboxinit.RootPlan, ownerUID, ownerGID uint32, tl *Timeline) (_ *sandbox, otherRoot, hurry bool) {
	defer tl.Mark("pool claim")
	p.mu.Lock()
	tl.Mark("pool lock wait")
	p.used[tenant] = time.Now()
	if p.target[tenant] == 0 {
		p.target[tenant] = p.Size
	}
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
		if time.Since(w.started) >= p.MaxAge {
			p.retire(w.s)
			continue
		}
		// Whether its init still runs is a read of its cgroup, made without the pool's lock:
		// every launch and refill of the node takes that lock.
		p.claims[tenant]++
		hurry := len(p.idle[tenant]) == 0 && p.target[tenant] > p.Size
		p.mu.Unlock()
		if alive, _ := cgroup.Populated(w.s.cg.V2); alive {
			return w.s, false, hurry
		}
		p.retire(w.s)
		p.mu.Lock()
		p.claims[tenant]--
	}
	if !otherRoot {
		p.target[tenant] = grow(p.target[tenant], p.Size, p.MaxPerTenant)
	}
	p.mu.Unlock()
	return nil, otherRoot, true
}

// reapInterval is how often a pool's cold launches look for the cgroups of calls whose
// launcher was killed, at most.
const reapInterval = time.Second

// reapStale clears the cgroups calls whose launcher was killed left behind, in the
// background: one look at a time, and the next no sooner than reapInterval after it.
func (p *Pool) reapStale() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaping || p.closed {
		return
	}
	p.reaping = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if _, err := cgroup.ReapStale(); err != nil {
			p.Log.Warn("stale calls", "err", err)
		}
		t := time.NewTimer(reapInterval)
		select {
		case <-t.C:
		case <-p.stop:
		}
		t.Stop()
		p.mu.Lock()
		p.reaping = false
		p.mu.Unlock()
	}()
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

// refill starts sandboxes for tenant until it has its target (counting those being started),
// at most fillers at a time and within the node's MaxTotal.
func (p *Pool) refill(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.used[tenant] = time.Now()
	if p.target[tenant] == 0 {
		p.target[tenant] = p.Size
	}
	p.evictLocked()
	for {
		have := len(p.idle[tenant]) + p.starting[tenant]
		// Size is every tenant's floor; only growth beyond it counts against the node's bound,
		// so tenants that grew cannot leave another without its own.
		if p.starting[tenant] >= fillers || have >= p.target[tenant] || (have >= p.Size && p.totalLocked() >= p.MaxTotal) {
			return
		}
		p.starting[tenant]++
		p.wg.Add(1)
		go p.fill(tenant)
	}
}

// totalLocked is the node's warm sandboxes, started and starting.
func (p *Pool) totalLocked() int {
	n := 0
	for t, ws := range p.idle {
		n += len(ws) + p.starting[t]
	}
	for t, k := range p.starting {
		if _, ok := p.idle[t]; !ok {
			n += k
		}
	}
	return n
}

// fill starts one sandbox for tenant, then refills again (the target may want more).
func (p *Pool) fill(tenant string) {
	defer p.wg.Done()
	p.mu.Lock()
	plan := p.plans[tenant]
	owner, known := p.owners[tenant]
	p.mu.Unlock()
	// The workspace's idmap for the owner the tenant's calls had (a process to start): made
	// beside the init's start, not on the next call's way.
	var ownerOf *[2]uint32
	if known {
		ownerOf = &owner
	}
	s, err := startSandbox(p.layout, p.Init, tenant, warmName(), poolLimits, true, plan, ownerOf, nil)
	if err == nil {
		if ierr := s.waitIdmap(); ierr != nil {
			p.Log.Warn("prepare warm sandbox's workspace idmap", "tenant", tenant, "err", ierr)
		}
	}
	p.mu.Lock()
	p.starting[tenant]--
	if err != nil {
		p.mu.Unlock()
		p.Log.Warn("start warm sandbox", "tenant", tenant, "err", err)
		return
	}
	if p.closed || len(p.idle[tenant]) >= p.target[tenant] {
		// Closed, evicted or the target fell while it started.
		p.mu.Unlock()
		_ = s.discard()
		return
	}
	p.idle[tenant] = append(p.idle[tenant], warm{s, time.Now()})
	p.mu.Unlock()
	p.refill(tenant)
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
		delete(p.target, oldest)
		delete(p.claims, oldest)
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
	for _, n := range p.starting {
		if n > 0 {
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

// SetBounds sets how far demand grows warm sandboxes: per tenant and on the node (each at
// least Size).
func (p *Pool) SetBounds(perTenant, total int) error {
	if perTenant < 0 || total < 0 {
		return fmt.Errorf("warm sandbox bounds must be 0 or more, got %d per tenant and %d in all", perTenant, total)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.MaxPerTenant, p.MaxTotal = max(perTenant, p.Size), max(total, p.Size)
	return nil
}

// IdleByTenant is the number of warm sandboxes ready for each tenant that has any or is
// starting some (at most MaxTenants tenants).
func (p *Pool) IdleByTenant() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.target))
	for t := range p.target {
		out[t] = len(p.idle[t])
	}
	return out
}

// Targets is what each tenant keeps warm now.
func (p *Pool) Targets() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.target))
	for t, n := range p.target {
		out[t] = n
	}
	return out
}
