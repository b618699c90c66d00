// Package agent is berm's node agent: it loads the eBPF tracer, runs the event pipeline
// (ring buffer reader → per call: bounded queue with counted drops → decoder → subscribers) and keeps
// each sandboxed call's trail: its events in order, its counters and its record, in the
// journal.
package agent

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/dnsguard"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/agent/lsm"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/agent/tracer"
)

// Evaluator is a subscriber that derives events from events (the rules engine).
type Evaluator interface {
	Eval(ev *event.Event) []event.Event
	// EndCall drops what it keeps for the call (by event.Event.Key).
	EndCall(callKey string)
}

// Config configures an agent.
type Config struct {
	StateDir string // journal lives in StateDir/journal
	Tracer   tracer.Config
	// PollInterval is the reader's deadline: with batched wake-ups, the longest an event
	// waits in the ring when little is happening.
	PollInterval time.Duration
	Registry     prometheus.Registerer // nil: no metrics
	Logger       *slog.Logger
	Rules        Evaluator // optional
	// NetRoot is the cgroup v2 directory every call's cgroup lives under: the network
	// programs attach there once. Empty: no network layer (calls that need it are refused).
	NetRoot string
	// Retention bounds the journal (zero: journal.DefaultRetention).
	Retention journal.Retention
	// DNS configures the node's resolver, where every networked call's DNS goes (its
	// upstream: bermd --dns-upstream; default the host's resolv.conf).
	DNS dnsguard.Config
	// InjectRoots verify the servers behind injected credentials (nil: the host's roots, or
	// the file InjectRootsEnv names).
	InjectRoots *x509.CertPool
	// Kill ends every process of a call's cgroup. The launcher owns cgroups; the agent only
	// asks it to kill (a call that attempted a fatal syscall).
	Kill func(cgroupDir string) error
}

// Judge names the denial an event shows, when the kernel layer that refused it does not
// report it itself (Landlock, seccomp, the mount view). The launcher builds one per call from
// the call's policy (policy.Judge); the agent calls it on its decoder goroutine only.
type Judge interface {
	Denial(ev *event.Event) *event.Denial
}

// Agent traces sandboxed calls.
type Agent struct {
	cfg    Config
	log    *slog.Logger
	tr     *tracer.Tracer
	net    *netguard.Guard // nil: the kernel refused the cgroup sock hooks
	dns    *dnsguard.Resolver
	dnsErr error // why there is no resolver: calls whose policies name domains are refused
	// injectRoots verify injected credentials' servers (nil: the host's roots)
	injectRoots *x509.CertPool
	injectErr   error // the roots named could not be read: injected credentials are refused
	injectM     *inject.Metrics
	lsm         *lsm.LSM // nil: the kernel refused BPF LSM (reported, not fatal: Landlock enforces)
	layers      []string
	rd          *ringbuf.Reader
	jw          *journal.Writer
	m           *metrics
	clock       int64 // wall-clock ns minus boot-clock ns
	wg          sync.WaitGroup
	closing     chan struct{}

	mu    sync.Mutex
	calls map[uint64]*Call // by cgroup id
	slots [tracer.MaxSlots]bool

	userDrops [tracer.MaxSlots]atomic.Uint64
	// userNoise are, of userDrops, the noise records left out of a call's queue past its noise
	// share (vital.go).
	userNoise [tracer.MaxSlots]atomic.Uint64
	// queued are the bytes of raw records in every call's queue (bounded: nodeBytes).
	queued atomic.Int64
	// consumed are the bytes of each slot's events the reader took out of the ring, told to
	// the kernel per batch (its ring share: tracer.Config.RingShare).
	consumed [tracer.MaxSlots]atomic.Uint64

	barrierMu sync.Mutex
	barriers  []barrierReq

	rules atomic.Pointer[Evaluator]

	secrets *secrets.Registry // live brokered secrets, by call (credentials.go)
}

// New loads the tracer, opens the journal and starts the pipeline.
func New(cfg Config) (a *Agent, err error) {
	if cfg.StateDir == "" {
		return nil, errors.New("agent: no state dir")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tracer.RingBytes == 0 {
		cfg.Tracer = tracer.DefaultConfig
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, calls: map[uint64]*Call{}, closing: make(chan struct{})}
	if cfg.Rules != nil {
		a.rules.Store(&cfg.Rules)
	}
	fp, err := secrets.LoadKey(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a.secrets = secrets.NewRegistry(fp)
	a.jw, err = journal.OpenWriter(filepath.Join(cfg.StateDir, "journal"))
	if err != nil {
		return nil, err
	}
	a.tr, err = tracer.New(cfg.Tracer)
	if err != nil {
		a.jw.Close()
		return nil, err
	}
	a.layers = []string{event.LayerTrace}
	if a.net, err = netguard.New(a.tr.Shared()); err != nil {
		a.log.Warn("network layer unavailable: calls that need filtered network access will be refused", "err", err)
		a.net = nil
	} else if cfg.NetRoot == "" {
		a.log.Warn("network layer unavailable: no cgroup root to attach it to; calls that need filtered network access will be refused")
		a.net.Close()
		a.net = nil
	} else if err := a.net.AttachRoot(cfg.NetRoot); err != nil {
		a.log.Warn("network layer unavailable: calls that need filtered network access will be refused", "err", err)
		a.net.Close()
		a.net = nil
	} else {
		a.layers = append(a.layers, event.LayerCgroupSock)
		if a.net.FailOpen != "" {
			a.log.Warn("network layer: not failing closed for orphaned cgroups", "why", a.net.FailOpen)
		}
		if cfg.DNS.Logger == nil {
			cfg.DNS.Logger = a.log
		}
		if cfg.DNS.Registry == nil {
			cfg.DNS.Registry = cfg.Registry
		}
		if a.dns, a.dnsErr = dnsguard.New(cfg.DNS); a.dnsErr != nil {
			a.log.Warn("dns resolver unavailable: calls whose policies name domains will be refused", "err", a.dnsErr)
		}
	}
	a.injectM = inject.NewMetrics(cfg.Registry)
	a.injectRoots = cfg.InjectRoots
	if a.injectRoots == nil {
		if a.injectRoots, a.injectErr = LoadInjectRoots(os.Getenv(InjectRootsEnv)); a.injectErr != nil {
			a.log.Warn("injected credentials: upstream roots unreadable: calls with injected credentials will be refused", "err", a.injectErr)
		}
	}
	if a.lsm, err = lsm.New(a.tr.Shared()); err != nil {
		if !errors.Is(err, lsm.ErrRefused) {
			a.log.Warn("bpf lsm layer unavailable", "err", err)
		}
		a.lsm = nil
	} else {
		a.layers = append(a.layers, event.LayerLSM)
	}
	a.rd, err = ringbuf.NewReader(a.tr.Events())
	if err != nil {
		a.closeLayers()
		a.tr.Close()
		a.jw.Close()
		return nil, fmt.Errorf("open ring buffer reader: %w", err)
	}
	a.clock = time.Now().UnixNano() - bootNanos()
	a.m = newMetrics(cfg.Registry, func() float64 { return float64(a.rd.AvailableBytes()) }, float64(a.rd.BufferSize()))
	registerQueueMetrics(cfg.Registry, a.queued.Load, nodeBytes)
	if cfg.Retention == (journal.Retention{}) {
		a.cfg.Retention = journal.DefaultRetention
	}
	a.wg.Add(2)
	go a.readLoop()
	go a.keepJournal()
	return a, nil
}

// SetRules replaces the rules evaluator (hot reload swaps inside the engine; this is for
// installing one after start).
func (a *Agent) SetRules(e Evaluator) { a.rules.Store(&e) }

func bootNanos() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// Close stops the pipeline and unloads the tracer. Calls still open are ended as incomplete.
func (a *Agent) Close() error {
	for _, c := range a.openCalls() {
		_, _ = a.End(c, Result{Reason: event.EndUnknown, Detail: "agent stopped"})
	}
	close(a.closing)
	err := a.rd.Close()
	a.wg.Wait()
	return errors.Join(err, a.closeLayers(), a.tr.Close(), a.jw.Close())
}

func (a *Agent) closeLayers() error {
	var errs []error
	if a.dns != nil {
		errs = append(errs, a.dns.Close())
	}
	if a.net != nil {
		errs = append(errs, a.net.Close())
	}
	if a.lsm != nil {
		errs = append(errs, a.lsm.Close())
	}
	return errors.Join(errs...)
}

// Layers are the observation and enforcement layers this agent gives its calls.
func (a *Agent) Layers() []string { return a.layers }

// ExecGate is the call's exec gate in the kernel: the exec hook holds its gated execs to
// what its approval supervisor decided.
func (a *Agent) ExecGate(c *Call) *tracer.ExecGate { return a.tr.ExecGate(c.cgroup) }

// Journal is where the agent writes.
func (a *Agent) Journal() *journal.Writer { return a.jw }

// Call is one traced tool call.
type Call struct {
	Start  event.CallStart
	cgroup uint64
	slot   uint32

	judge  Judge
	policy *policy.Compiled
	redact []secrets.Pattern // CallOptions.Redact
	net    *netguard.CallNet
	lsm    bool
	// The call's surfaces (surfaces.go): the kernel layers attached to it, those its policy
	// asked for and the kernel refused.
	netAttached, lsmAttached bool
	refused                  []string
	cgroupDir                string
	// networked: the call shares the host's network (its egress judged by the cgroup hooks);
	// dnsUpstream overrides the resolver's upstream for it.
	networked   bool
	dnsUpstream string
	dnsMu       sync.Mutex     // dns and dnsDropped: a reload attaches or detaches the resolver
	dns         *dnsguard.Call // the call's resolver listeners, while its policy names domains
	injectMu    sync.Mutex
	inject      *inject.Call // the call's injecting egress, while it holds injected credentials
	// dnsDropped are its UDP queries the kernel dropped before its resolver read them, known
	// once its listeners are closed (closeDNS).
	dnsDropped uint64
	// resolved are the addresses its resolver answered, while its policy names domains (read
	// by its worker: markUnresolved); nil otherwise.
	resolved atomic.Pointer[dnsguard.Resolved]
	// fatal is the spec.syscalls.fatal syscall seen refused (the filter killed its process).
	fatal string
	// initPID is the sandbox init (the call's first process): its setup is berm's own doing,
	// traced like everything else but not judged as the tool's.
	initPID  uint32
	initExe  string
	stageExe string
	mark     func(string)
	// toolStarted: a child of the init executed something other than the init's binary or
	// the tool's stage (the tool). From then on, the init's children are the tool's (orphans
	// it reaps), not set-up.
	toolStarted bool

	// The call's own pipeline stage (callworker.go): the decoder hands it the call's events
	// and never waits for it, so one call's slow or voluminous events delay only that call.
	worker

	// Owned by the call's worker goroutine until End has stopped it.
	seq     uint64
	counts  event.Counts
	denials map[string]uint64
	alerts  map[string]uint64 // surface -> alerts
	// alertList and alertsOmitted are the record's list of alerts (event.AppendAlert).
	alertList     []event.AlertRef
	alertsOmitted uint64
	limits        uint64            // cap hits
	procs         map[uint32]string // pid -> executable
	pending       []event.Event
	agg           aggregator
	// leaksSeen: the live secrets already recorded as found in this call's trail, by owner,
	// name, place and encoding (credentials.go).
	leaksSeen map[string]bool
	// envs: exec environments waiting for their exec event, by thread (execenv.go)
	envs map[uint32]heldEnv
	// journalLost are events the journal refused (disk full, I/O error), journalErr why.
	journalLost uint64
	journalErr  error
}

// CallOptions say how to trace a call.
type CallOptions struct {
	Traced []uint32 `json:"traced"` // syscalls reported one by one
	// RefusalsOnly are the syscalls of Traced reported only when refused (EPERM).
	RefusalsOnly []uint32 `json:"refusals_only,omitempty"`
	// Policy is the call's compiled policy (its network and file rules go to the kernel
	// layers); Judge names the denials it shows. nil: no policy, nothing attributed.
	Policy    *policy.Compiled `json:"-"`
	Judge     Judge            `json:"-"`
	CgroupDir string           `json:"cgroup_dir"` // the call's cgroup v2 directory, for cgroup hooks
	// Network says the call shares the host's network namespace: the cgroup sock hooks
	// enforce its egress policy, and a call that needs them is refused when they are missing.
	Network bool `json:"network"`
	// InitPID is the sandbox init, already in the cgroup when the call begins: its set-up is
	// berm's, not the tool's, and is not judged. So is its child's until that child executes
	// the tool (the tool's stage: it runs StageExe, or the init's own binary, InitExe).
	InitPID  uint32 `json:"init_pid,omitempty"`
	InitExe  string `json:"init_exe,omitempty"`  // the init binary's file name (default berm-init)
	StageExe string `json:"stage_exe,omitempty"` // the tool's stage's file name (berm-stage)
	// EventBudget is how many events the call records one by one (0: DefaultEventBudget);
	// past it, high-volume kinds are aggregated per kind and object.
	EventBudget int64 `json:"event_budget,omitempty"`
	// DNSUpstream, for a networked call, overrides the resolver's upstream (berm run
	// --dns-upstream).
	DNSUpstream string `json:"dns_upstream,omitempty"`
	// Redact are the policy's output patterns (spec.output.redact): what matches them in a
	// string of the trail the tool chose (a path, an argument, an address) is replaced by its
	// marker before the event is recorded, as a live brokered secret is.
	Redact []secrets.Pattern `json:"-"`
	// Mark, when set, is told the end of each of Begin's and End's phases (the launcher's
	// per-phase times: sandboxer.Timeline).
	Mark func(phase string) `json:"-"`
}

// markPhase tells the launcher a phase of the call's begin or end is over.
func (c *Call) markPhase(phase string) {
	if c.mark != nil {
		c.mark(phase)
	}
}

// DefaultEventBudget is a call's event budget when its options name none.
const DefaultEventBudget = 200_000

// Begin starts tracing the cgroup as a call. It must be called before the tool's first
// instruction: the cgroup holds nothing yet, or only the sandbox init waiting for its
// configuration. Then not one instruction of the tool runs untraced.
func (a *Agent) Begin(start event.CallStart, opts CallOptions) (*Call, error) {
	traced := opts.Traced
	start.Layers = append(append([]string(nil), start.Layers...), a.layers...)
	start.CallKey = newCallKey()
	// A call whose records could be lost to a full disk does not start.
	if err := a.jw.Room(); err != nil {
		return nil, fmt.Errorf("begin call %s: %w", start.CallID, err)
	}
	a.mu.Lock()
	slot := -1
	for i, used := range a.slots {
		if !used {
			slot = i
			break
		}
	}
	if slot < 0 {
		a.mu.Unlock()
		return nil, fmt.Errorf("begin call %s: %d calls are traced already, the node's limit", start.CallID, tracer.MaxSlots)
	}
	if _, dup := a.calls[start.CgroupID]; dup {
		a.mu.Unlock()
		return nil, fmt.Errorf("begin call %s: cgroup %d is traced already", start.CallID, start.CgroupID)
	}
	c := &Call{Start: start, cgroup: start.CgroupID, slot: uint32(slot), denials: map[string]uint64{}, alerts: map[string]uint64{}, procs: map[uint32]string{}, judge: opts.Judge, policy: opts.Policy, cgroupDir: opts.CgroupDir, initPID: opts.InitPID, initExe: opts.InitExe, stageExe: opts.StageExe, redact: opts.Redact, mark: opts.Mark}
	if c.initExe == "" {
		c.initExe = "berm-init"
	}
	c.agg.budget = uint64(DefaultEventBudget)
	if opts.EventBudget > 0 {
		c.agg.budget = uint64(opts.EventBudget)
	}
	c.worker.init()
	a.slots[slot] = true
	a.calls[start.CgroupID] = c
	a.mu.Unlock()

	fail := func(err error) (*Call, error) {
		a.mu.Lock()
		delete(a.calls, start.CgroupID)
		a.slots[slot] = false
		a.mu.Unlock()
		return nil, err
	}
	startLeaks := a.scrubStart(c)
	c.markPhase("registration: slot and scrub")
	if err := a.jw.AppendCallStart(&c.Start); err != nil {
		return fail(fmt.Errorf("begin call %s: %w", start.CallID, err))
	}
	c.markPhase("registration: journal call start")
	// From here the journal holds the call's start: a failure must end it there too, or the
	// journal would show a call that never ends.
	failStarted := func(err error) (*Call, error) {
		err = fmt.Errorf("begin call %s: %w", start.CallID, err)
		rec := &event.CallRecord{CallStart: c.Start, End: time.Now(), EndReason: event.EndSetupFailed, EndDetail: err.Error(),
			ExitStatus: 125, Syscalls: map[string]uint64{}, Denials: map[string]uint64{}, Complete: true}
		rec.Surfaces = c.surfaces(rec, nil, 0)
		if jerr := a.jw.AppendCallEnd(rec); jerr != nil {
			a.m.journalErrs.Inc()
			err = errors.Join(err, jerr)
		}
		a.m.calls.WithLabelValues(string(event.EndSetupFailed)).Inc()
		return fail(err)
	}
	a.userDrops[slot].Store(0)
	a.userNoise[slot].Store(0)
	a.consumed[slot].Store(0)
	if err := a.tr.ResetShare(uint32(slot)); err != nil {
		return failStarted(err)
	}
	if err := a.tr.ResetKernelCounts(uint32(slot)); err != nil {
		return failStarted(err)
	}
	audit := opts.Policy != nil && opts.Policy.Mode == policy.Audit
	if err := a.tr.Register(start.CgroupID, tracer.CallConfig{Slot: uint32(slot), Traced: traced, RefusalsOnly: opts.RefusalsOnly, Audit: audit, InitTGID: opts.InitPID, InitExe: c.initExe, StageExe: c.stageExe}); err != nil {
		return failStarted(err)
	}
	if err := a.attachLayers(c, opts); err != nil {
		_ = a.tr.Unregister(start.CgroupID)
		a.detachLayers(c)
		return failStarted(err)
	}
	a.m.active.Inc()
	go a.work(c)
	for _, l := range startLeaks {
		a.Emit(c, l)
	}
	return c, nil
}

// attachLayers installs the call's kernel-side enforcement before its first process exists.
func (a *Agent) attachLayers(c *Call, opts CallOptions) error {
	p := opts.Policy
	if p == nil {
		if opts.Network {
			return errors.New("network access needs a policy")
		}
		return nil
	}
	if opts.Network && a.net == nil {
		return errors.New("the call needs filtered network access and the cgroup sock hooks are unavailable: refusing (fail closed)")
	}
	if a.net != nil && opts.CgroupDir != "" {
		cn, err := a.net.Attach(opts.CgroupDir, c.cgroup, &p.Network, p.Mode == policy.Audit)
		if err != nil {
			return err
		}
		c.net, c.netAttached = cn, true
		if opts.Network {
			c.networked, c.dnsUpstream = true, opts.DNSUpstream
			if err := a.attachDNS(c, &p.Network); err != nil {
				return err
			}
		}
	}
	if a.lsm == nil {
		c.refused = append(c.refused, event.LayerLSM)
	} else {
		rules := lsm.FromLandlock(p.Landlock, uint32(len(p.Rules)))
		if err := a.lsm.SetPolicy(c.cgroup, rules...); err != nil {
			return err
		}
		c.lsm, c.lsmAttached = true, true
	}
	return nil
}

// attachDNS sends the networked call's DNS to its own listeners of the node's resolver, which
// answer only what its domain rules allow and pin the answers for it. A policy that names no
// domain has no resolver: its DNS is judged by its CIDR rules, as any other traffic (a cidr
// rule opening port 53 reaches the server it names, as before domain rules existed).
func (a *Agent) attachDNS(c *Call, pol *policy.NetPolicy) error {
	if len(pol.Domains) == 0 {
		return nil
	}
	if a.dns == nil {
		return fmt.Errorf("the policy names domains and the dns resolver is unavailable (%v): refusing (fail closed)", a.dnsErr)
	}
	c.dnsMu.Lock()
	defer c.dnsMu.Unlock()
	if c.dns != nil {
		c.dns.Update(pol)
		return nil
	}
	d, err := a.dns.Attach(dnsguard.CallConfig{Name: c.Start.CallID, Policy: pol, Audit: c.policy != nil && c.policy.Mode == policy.Audit,
		Upstream: c.dnsUpstream, Pins: c.net, Emit: func(ev event.Event) { a.Emit(c, ev) }, Secrets: a.secrets, CallKey: c.Start.CallKey})
	if err != nil {
		return err
	}
	if err := c.net.SetResolver(d.Port()); err != nil {
		d.Close()
		c.dnsDropped += d.Dropped()
		return errors.Join(err, c.net.ClearResolver())
	}
	c.dns = d
	c.resolved.Store(d.Resolved())
	return nil
}

// closeDNS stops the call's resolver listeners: after it, no dns event of the call is emitted.
func (c *Call) closeDNS() error {
	c.dnsMu.Lock()
	defer c.dnsMu.Unlock()
	if c.dns == nil {
		return nil
	}
	err := c.dns.Close()
	c.dnsDropped += c.dns.Dropped()
	c.dns = nil
	return err
}

func (a *Agent) detachLayers(c *Call) error {
	var errs []error
	errs = append(errs, c.closeDNS(), c.closeInject())
	if c.net != nil {
		errs = append(errs, c.net.Close())
		c.net = nil
	}
	if c.lsm {
		errs = append(errs, a.lsm.Remove(c.cgroup))
		c.lsm = false
	}
	return errors.Join(errs...)
}

// UpdateNetwork hot-reloads a running call's egress policy, atomically.
func (a *Agent) UpdateNetwork(c *Call, pol *policy.NetPolicy) error {
	if c.net == nil {
		return fmt.Errorf("call %s has no network layer attached", c.Start.CallID)
	}
	// The kernel's maps are what decide; the judge's copy of the policy belongs to the decoder
	// goroutine and only names raw-socket refusals, which a network reload does not change.
	// An injecting egress keeps the hosts it was started with (a reload that changes them is
	// refused); their rules' new ids are what the resolver's pins are moved by from now on.
	restore, err := c.reloadInjectRules(pol)
	if err != nil {
		return err
	}
	// Domains named now: the resolver first, so the new domain rules find their pins made.
	if c.networked {
		if err := a.attachDNS(c, pol); err != nil {
			restore()
			return err
		}
	}
	if err := c.net.Update(pol); err != nil {
		restore()
		return err
	}
	if len(pol.Domains) > 0 {
		return nil
	}
	// Domains no longer named: the call's DNS is its CIDR rules' to judge again, and its pins,
	// of rules that are gone, go.
	c.resolved.Store(nil)
	return errors.Join(c.net.ClearResolver(), c.closeDNS())
}

// Emit adds an event observed outside the kernel (a cap hit, a denial by the launcher) to the
// call's stream, behind the kernel events routed to the call so far. It never blocks: a call
// whose queue is full loses it, counted against the call.
func (a *Agent) Emit(c *Call, ev event.Event) {
	ev.Time = time.Now()
	a.route(c, &batch{user: &ev})
}

// Result is what the launcher knows at the end of a call.
type Result struct {
	Reason      event.EndReason
	Detail      string
	ExitStatus  int
	ExitCode    int
	ExitSignal  int
	Limits      event.Limits
	CPUTimeNs   uint64
	PeakMemory  uint64
	OutputBytes int64
	// Populated: processes of the call survived every kill (uninterruptible sleep). The call
	// stays registered (traced, and judged by the kernel layers) until the launcher reports
	// its cgroup empty with Release: unregistered, they would be nobody's.
	Populated bool
	// Leftovers: what the launcher found (and did) in the workspace after the call.
	Leftovers          []event.Leftover
	LeftoversTruncated bool
	// Credentials: the brokered credentials the call received (names, fingerprints, revokes).
	Credentials []event.CredentialUse
}

// A call's end drains what its queue holds: it waits for the call's worker as long as the
// worker makes progress, so a call whose queue is long (a flood before its last actions)
// still has every queued event in its trail. What bounds the wait is work, not a clock a
// flood can exhaust: once the call is unregistered nothing more enters its queue, the queue
// is bounded (inboxBatches, inboxBytes), and so is the worker's cost per event (the judge's
// host reads have a budget, and none is made on a FUSE or network file system, whose server
// may never answer: agent/policy's judge_resolve.go). Two guards remain for a worker that no longer advances (a rule
// or the judge that does not return): BarrierIdle without one event finished, or
// DrainCeiling in all, far past what a bounded queue takes; past either, what is still on the
// way is counted as dropped and the record says it is incomplete. Only the call's own events
// are waited for: another call's volume cannot make it longer.
var (
	BarrierIdle  = 5 * time.Second
	DrainCeiling = 2 * time.Minute
)

// End stops tracing the call once every event it produced has gone through the pipeline, and
// writes its record. The launcher calls it after the call's cgroup is empty.
func (a *Agent) End(c *Call, res Result) (*event.CallRecord, error) {
	var errs []error
	var incomplete []string
	// the resolver's and the egress's events of the call go into the queue before the barrier passes through it
	if err := errors.Join(c.closeDNS(), c.closeInject()); err != nil {
		errs = append(errs, err)
	}
	if !res.Populated {
		if err := a.tr.Unregister(c.cgroup); err != nil {
			errs = append(errs, err)
		}
	}
	c.markPhase("end: unregister")
	if err := a.barrier(c, BarrierIdle, DrainCeiling); err != nil {
		errs = append(errs, fmt.Errorf("end call %s: %w", c.Start.CallID, err))
		incomplete = append(incomplete, err.Error())
		c.abandoned.Store(true)
	}
	c.markPhase("end: drain barrier")
	if !res.Populated {
		if err := a.detachLayers(c); err != nil {
			errs = append(errs, err)
		}
	} else {
		incomplete = append(incomplete, "processes of the call survived its end; their later events are not in this trail")
	}
	a.mu.Lock()
	delete(a.calls, c.cgroup)
	c.ended = true // under a.mu: the reader routes nothing to the call from now on
	a.mu.Unlock()
	// The worker stops after the event at hand; what it never took counts as lost.
	late, lostBytes, stuck := c.stop(time.Second)
	a.queued.Add(-lostBytes)
	if stuck {
		return a.endStuck(c, res, errs)
	}
	defer c.state.Unlock()

	rec, kerrs := a.newRecord(c, res, c.fatal, c.denials)
	errs = append(errs, kerrs...)
	rec.Dropped.User += late
	a.m.drops.WithLabelValues("user").Add(float64(late))
	if rec.Dropped.Kernel > 0 || rec.Dropped.User > 0 || rec.Dropped.DNS > 0 {
		d := rec.Dropped
		a.appendLast(c, event.Event{Time: rec.End, Kind: event.KindDrop, Drop: &d})
		a.log.Warn("events dropped", "call_id", c.Start.CallID, "kernel", d.Kernel, "kernel_noise", d.KernelNoise,
			"user", d.User, "user_noise", d.UserNoise, "dns", d.DNS)
	}
	if d := rec.Dropped; d.Kernel > 0 || d.User > 0 {
		incomplete = append(incomplete, fmt.Sprintf("%d events lost in the kernel (ring buffer full or past a share), %d in the agent; of them %d noise (failed opens, reads, forks, exits, ...) and at most %d vital (an exec, connect, denial, destructive operation or refusal)",
			d.Kernel, d.User, d.KernelNoise+d.UserNoise, d.Kernel-d.KernelNoise+d.User-d.UserNoise))
	}
	if d := rec.Dropped; d.DNS > 0 {
		incomplete = append(incomplete, fmt.Sprintf("%d dns queries dropped by the kernel before berm's resolver read them (the call's resolver socket was full): not answered, not recorded", d.DNS))
	}
	// What the kernel counted instead of reporting (the call past its budget) joins the
	// syscalls' aggregates: the record's totals are every event's.
	kcounts, err := a.tr.TakeKernelCounts(c.slot)
	if err != nil {
		errs = append(errs, err)
		incomplete = append(incomplete, "the syscalls counted in the kernel past the event budget could not be read")
	}
	for nr, k := range kcounts {
		c.agg.addKernel(event.SyscallName(nr), k.N, k.Failed)
		c.counts.Syscall += k.N
	}
	for _, ag := range c.agg.events(rec.End) {
		a.appendLast(c, ag)
	}
	rec.Aggregated = c.agg.total
	if err := a.flush(c); err != nil {
		errs = append(errs, err)
	}
	if c.journalLost > 0 {
		rec.Dropped.User += c.journalLost
		incomplete = append(incomplete, fmt.Sprintf("%d events the journal refused (%v)", c.journalLost, c.journalErr))
	}
	rec.Counts = c.counts
	rec.Events = c.seq
	rec.Complete = len(incomplete) == 0
	rec.IncompleteReason = strings.Join(incomplete, "; ")
	rec.Surfaces = c.surfaces(rec, c.alerts, c.limits)
	rec.Alerts, rec.AlertsOmitted = c.alertList, c.alertsOmitted
	c.markPhase("end: record")
	if err := a.jw.AppendCallEnd(rec); err != nil {
		a.m.journalErrs.Inc()
		errs = append(errs, err)
	}
	c.markPhase("end: journal call end")
	if r := a.rules.Load(); r != nil {
		(*r).EndCall(c.Start.CallKey)
	}
	if res.Populated {
		a.m.lingering.Inc()
	} else {
		a.freeSlot(c)
	}
	a.m.active.Dec()
	a.m.calls.WithLabelValues(string(res.Reason)).Inc()
	return rec, errors.Join(errs...)
}

// newRecord is the call's record as the launcher and the kernel know it: its end, with a
// fatal syscall's kill named (SIGSYS is how the seccomp filter kills its process, named even
// when its event was lost), its syscall counts and drops, taken from the call's slot.
func (a *Agent) newRecord(c *Call, res Result, fatal string, denials map[string]uint64) (*event.CallRecord, []error) {
	if (fatal != "" || res.Reason == event.EndSignal && res.ExitSignal == int(unix.SIGSYS)) && c.policy != nil {
		if detail, ok := c.policy.FatalEnd(fatal); ok {
			res.Reason, res.Detail = event.EndPolicyKill, detail
			if res.ExitSignal != 0 {
				res.ExitStatus, _ = event.EndedStatus(event.EndPolicyKill)
			}
		}
	}
	rec := &event.CallRecord{
		RecordVersion: event.RecordVersion, CallStart: c.Start, End: time.Now(), EndReason: res.Reason, EndDetail: res.Detail,
		ExitStatus: res.ExitStatus, ExitCode: res.ExitCode, ExitSignal: res.ExitSignal,
		Limits: res.Limits, CPUTimeNs: res.CPUTimeNs, PeakMemory: res.PeakMemory, OutputBytes: res.OutputBytes,
		Syscalls: map[string]uint64{}, Denials: denials,
		Leftovers: res.Leftovers, LeftoversTruncated: res.LeftoversTruncated, Credentials: res.Credentials,
	}
	var errs []error
	counts, err := a.tr.TakeSyscallCounts(c.slot)
	if err != nil {
		errs = append(errs, err)
	}
	for nr, n := range counts {
		rec.Syscalls[event.SyscallName(nr)] = n
		rec.SyscallTotal += n
	}
	kdrops, err := a.tr.TakeDrops(c.slot)
	if err != nil {
		errs = append(errs, err)
	}
	c.dnsMu.Lock()
	rec.Dropped = event.Drop{Kernel: kdrops.Total(), KernelNoise: kdrops.Noise, User: a.userDrops[c.slot].Swap(0),
		UserNoise: a.userNoise[c.slot].Swap(0), DNS: c.dnsDropped}
	c.dnsMu.Unlock()
	a.m.drops.WithLabelValues("kernel").Add(float64(kdrops.Total()))
	return rec, errs
}

// endStuck writes the record of a call whose pipeline stage never came back from one of its
// events: what it counted is not readable, and the record says so.
func (a *Agent) endStuck(c *Call, res Result, errs []error) (*event.CallRecord, error) {
	// The stage's own state (its fatal syscall seen, its denials) is not readable.
	rec, kerrs := a.newRecord(c, res, "", map[string]uint64{})
	errs = append(errs, kerrs...)
	rec.IncompleteReason = "the call's stage of the pipeline is stuck in one of its events (a rule or the judge did not return): its counts are unknown and its trail ends here"
	rec.Surfaces = c.surfaces(rec, nil, 0)
	if err := a.jw.AppendCallEnd(rec); err != nil {
		a.m.journalErrs.Inc()
		errs = append(errs, err)
	}
	if r := a.rules.Load(); r != nil {
		(*r).EndCall(c.Start.CallKey)
	}
	a.log.Error("call ended with its pipeline stage stuck", "call_id", c.Start.CallID)
	if !res.Populated {
		a.freeSlot(c)
	}
	a.m.active.Dec()
	a.m.calls.WithLabelValues(string(res.Reason)).Inc()
	return rec, errors.Join(errs...)
}

// barrier returns once every event of c submitted to the ring before it was called has gone
// through c's worker. It waits for c's own events only, for as long as the worker advances
// (an event finished within idle), and no longer than ceiling in all.
func (a *Agent) barrier(c *Call, idle, ceiling time.Duration) error {
	done := make(chan struct{})
	a.barrierMu.Lock()
	a.barriers = append(a.barriers, barrierReq{c: c, done: done})
	a.barrierMu.Unlock()
	if err := a.rd.Flush(); err != nil {
		return fmt.Errorf("flush ring buffer: %w", err)
	}
	all := time.NewTimer(ceiling)
	defer all.Stop()
	tick := time.NewTicker(idle)
	defer tick.Stop()
	return drainWait(done, c.progress.Load, tick.C, all.C, idle, ceiling)
}

// drainWait waits for done while progress grows between ticks, until the ceiling.
func drainWait(done <-chan struct{}, progress func() uint64, tick, ceiling <-chan time.Time, idle, all time.Duration) error {
	last := progress()
	for {
		select {
		case <-done:
			return nil
		case <-ceiling:
			return fmt.Errorf("the call's events did not go through the pipeline within %s", all)
		case <-tick:
			now := progress()
			if now == last {
				select {
				case <-done:
					return nil
				default:
				}
				return fmt.Errorf("the call's stage of the pipeline finished no event for %s", idle)
			}
			last = now
		}
	}
}

func (a *Agent) lookup(cgroup uint64) *Call {
	a.mu.Lock()
	c := a.calls[cgroup]
	a.mu.Unlock()
	return c
}

// append gives the event its place in the call's stream and runs the subscribers. Only the
// call's worker calls it.
func (a *Agent) append(c *Call, ev event.Event) {
	setup := c.setupEvent(&ev)
	if setup {
		ev.Phase = event.PhaseSetup
	}
	leaks := a.scrub(c, &ev)
	c.markUnresolved(&ev)
	a.record(c, &ev)
	for _, l := range leaks {
		a.append(c, l)
	}
	if setup {
		return
	}
	// The denial an event shows follows it directly; rules then see both.
	if c.judge != nil && ev.Kind != event.KindDenial && ev.Kind != event.KindAlert {
		if denial := c.judge.Denial(&ev); denial != nil {
			d := ev
			d.Kind, d.Denial = event.KindDenial, denial
			d.Exec, d.Fork, d.Exit, d.Open, d.Connect, d.Syscall = nil, nil, nil, nil, nil, nil
			a.append(c, d)
			if ev.Syscall != nil && denial.Layer == event.LayerSeccomp && !denial.Audit && c.policy != nil && c.policy.Fatal[ev.Syscall.Nr] {
				// The filter killed the process that tried it, whatever became of this
				// event; seen, the rest of the call goes too (a child's attempt ends the call).
				if c.fatal == "" && a.cfg.Kill != nil && c.cgroupDir != "" {
					if err := a.cfg.Kill(c.cgroupDir); err != nil {
						a.log.Error("end a call after its fatal syscall", "call_id", c.Start.CallID, "err", err)
					}
				}
				c.fatal = ev.Syscall.Name
			}
		}
	}
	if r := a.rules.Load(); r != nil && ev.Kind != event.KindAlert {
		for _, al := range (*r).Eval(&ev) {
			a.append(c, al)
		}
	}
}

// appendLast records an event of the call's end (drops, aggregates), after its worker stopped.
func (a *Agent) appendLast(c *Call, ev event.Event) { a.record(c, &ev) }

// record numbers the event, counts it and puts it in the journal's queue, or in the call's
// aggregates once the call is past its event budget. Set-up events are numbered and
// journalled (berm timeline --all shows them) but not counted as the tool's.
func (a *Agent) record(c *Call, ev *event.Event) {
	c.seq++
	ev.Seq = c.seq
	ev.CallID, ev.CallKey, ev.Tool, ev.Tenant = c.Start.CallID, c.Start.CallKey, c.Start.Tool, c.Start.Tenant
	a.m.events.WithLabelValues(string(ev.Kind)).Inc()
	if ev.Phase != event.PhaseSetup {
		c.counts.Add(ev)
		if ev.Kind == event.KindDenial && ev.Denial != nil {
			c.denials[ev.Denial.Surface]++
			a.m.denials.WithLabelValues(ev.Denial.Layer, ev.Denial.Surface, auditLabel(ev.Denial.Audit)).Inc()
		}
		if ev.Kind == event.KindAlert && ev.Alert != nil {
			c.alerts[ev.Alert.Surface]++
			c.alertList, c.alertsOmitted = event.AppendAlert(c.alertList, c.alertsOmitted, ev)
		}
		if ev.Kind == event.KindLimit {
			c.limits++
		}
	}
	if aggregated, ag := c.agg.take(ev); aggregated {
		a.countInKernel(c, ev, ag)
		return
	}
	c.pending = append(c.pending, *ev)
	if len(c.pending) >= 1024 {
		if err := a.flush(c); err != nil {
			a.log.Error("journal append failed", "call_id", c.Start.CallID, "err", err)
		}
	}
}

// kernelCountAfter is how many of one path-less syscall a call past its budget has aggregated
// before the kernel is asked to count the rest itself: a syscall that floods, not one that
// shows up now and then (those stay events, seen one by one by the judge and the rules).
const kernelCountAfter = 1024

// countInKernel asks the kernel to count a flooding syscall of a call past its budget instead
// of reporting each: the agent would only aggregate them, and decoding them is what a flood
// costs it. The totals stay exact (End adds the kernel's counts to the aggregate).
func (a *Agent) countInKernel(c *Call, ev *event.Event, ag *event.Aggregate) {
	if ev.Kind != event.KindSyscall || ev.Syscall == nil || ev.Syscall.Path != "" ||
		ag.Count != kernelCountAfter || ag.Object != ev.Syscall.Name {
		return
	}
	if err := a.tr.CountInKernel(c.slot, ev.Syscall.Nr); err != nil {
		a.log.Error("count a flooding syscall in the kernel", "call_id", c.Start.CallID, "syscall", ev.Syscall.Name, "err", err)
	}
}

func auditLabel(b bool) string {
	if b {
		return "audit"
	}
	return "enforce"
}

func (a *Agent) flush(c *Call) error {
	if len(c.pending) == 0 {
		return nil
	}
	err := a.jw.AppendEvents(c.pending)
	if err != nil {
		// Keeping them for a later try would grow without bound while the journal's disk is
		// full: they are counted as lost, against the call, and the record says so.
		a.m.journalErrs.Inc()
		c.journalLost += uint64(len(c.pending))
		c.journalErr = err
		err = fmt.Errorf("journal %d events of call %s: %w", len(c.pending), c.Start.CallID, err)
	}
	c.pending = c.pending[:0]
	return err
}

// openCalls is a snapshot of the calls being traced.
func (a *Agent) openCalls() []*Call {
	a.mu.Lock()
	defer a.mu.Unlock()
	calls := make([]*Call, 0, len(a.calls))
	for _, c := range a.calls {
		calls = append(calls, c)
	}
	return calls
}

// enrich keeps the call's process tree and names each event's program and parent program.
func (c *Call) enrich(ev *event.Event) {
	switch ev.Kind {
	case event.KindExec:
		// The program is the file the kernel ran, not the name it was run by (a symlink, an
		// fd path): rules on proc.exe and proc.parent_exe see through planted names.
		c.procs[ev.PID] = ev.Exec.Filename
		if ev.Exec.ExePath != "" {
			c.procs[ev.PID] = ev.Exec.ExePath
		}
	case event.KindFork:
		if exe, ok := c.procs[ev.PID]; ok {
			c.procs[ev.Fork.ChildPID] = exe
		}
	}
	ev.Exe = c.procs[ev.PID]
	ev.ParentExe = c.procs[ev.PPID]
	if ev.Kind == event.KindExit {
		delete(c.procs, ev.PID)
	}
}

// Release ends what End left in place for a call whose processes survived it (Result.Populated),
// once the launcher has seen its cgroup empty: the kernel stops tracing and judging the cgroup,
// and its slot is free again.
func (a *Agent) Release(c *Call) error {
	errs := []error{a.tr.Unregister(c.cgroup), a.detachLayers(c)}
	a.freeSlot(c)
	a.m.lingering.Dec()
	return errors.Join(errs...)
}

func (a *Agent) freeSlot(c *Call) {
	a.mu.Lock()
	a.slots[c.slot] = false
	a.mu.Unlock()
}

// newCallKey is a call's unique identity: 128 random bits, so no two calls share one, whatever
// node, tenant or id they have.
func newCallKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("agent: no randomness for a call key: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// keepJournal applies the journal's retention, at start and every minute.
func (a *Agent) keepJournal() {
	defer a.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		if freed, err := a.jw.Prune(a.cfg.Retention); err != nil {
			a.log.Error("journal retention", "err", err)
		} else if freed > 0 {
			a.log.Info("journal retention: oldest segments deleted", "bytes", freed, "max_bytes", a.cfg.Retention.MaxBytes, "max_age", a.cfg.Retention.MaxAge)
		}
		select {
		case <-a.closing:
			return
		case <-t.C:
		}
	}
}

// setupEvent says whether ev is berm's own set-up: the init's, or its child's (the tool's stage)
// before that child executes the tool. Only the worker calls it (events in order).
func (c *Call) setupEvent(ev *event.Event) bool {
	switch {
	case ev.PID == 0:
		return false
	case ev.PID == c.initPID:
		return true
	case c.toolStarted || ev.PPID != c.initPID:
		return false
	case ev.Kind == event.KindExec && ev.Exec != nil && ev.Exec.ExeName != c.initExe && (c.stageExe == "" || ev.Exec.ExeName != c.stageExe):
		c.toolStarted = true
		return false
	}
	return true
}
