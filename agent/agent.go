// Package agent is berm's node agent: it loads the eBPF tracer, runs the event pipeline
// (ring buffer reader → bounded queue with counted drops → decoder → subscribers) and keeps
// each sandboxed call's trail: its events in order, its counters and its record, in the
// journal.
package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/agent/lsm"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/policy"
)

// Evaluator is a subscriber that derives events from events (the rules engine).
type Evaluator interface {
	Eval(ev *event.Event) []event.Event
	EndCall(callID string)
}

// Config configures an agent.
type Config struct {
	StateDir string // journal lives in StateDir/journal
	Tracer   tracer.Config
	// QueueBatches bounds the queue between the ring buffer reader and the decoder.
	QueueBatches int
	// PollInterval is the reader's deadline: with batched wake-ups, the longest an event
	// waits in the ring when little is happening.
	PollInterval time.Duration
	Registry     prometheus.Registerer // nil: no metrics
	Logger       *slog.Logger
	Rules        Evaluator // optional
}

// Agent traces sandboxed calls.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	tr      *tracer.Tracer
	net     *netguard.Guard // nil: the kernel refused the cgroup sock hooks
	lsm     *lsm.LSM        // nil: the kernel refused BPF LSM (reported, not fatal: Landlock enforces)
	layers  []string
	rd      *ringbuf.Reader
	jw      *journal.Writer
	m       *metrics
	queue   chan *batch
	clock   int64 // wall-clock ns minus boot-clock ns
	wg      sync.WaitGroup
	closing chan struct{}

	mu    sync.Mutex
	calls map[uint64]*Call // by cgroup id
	slots [tracer.MaxSlots]bool

	userDrops [tracer.MaxSlots]atomic.Uint64

	barrierMu sync.Mutex
	barriers  []chan struct{}

	rules atomic.Pointer[Evaluator]
}

// New loads the tracer, opens the journal and starts the pipeline.
func New(cfg Config) (a *Agent, err error) {
	if cfg.StateDir == "" {
		return nil, errors.New("agent: no state dir")
	}
	if cfg.QueueBatches == 0 {
		cfg.QueueBatches = 1024
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
	a = &Agent{cfg: cfg, log: cfg.Logger, calls: map[uint64]*Call{}, closing: make(chan struct{}),
		queue: make(chan *batch, cfg.QueueBatches)}
	if cfg.Rules != nil {
		a.rules.Store(&cfg.Rules)
	}
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
	} else if err := a.attachNetRoot(); err != nil {
		a.log.Warn("network layer unavailable: calls that need filtered network access will be refused", "err", err)
		a.net.Close()
		a.net = nil
	} else {
		a.layers = append(a.layers, event.LayerCgroupSock)
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
	a.wg.Add(2)
	go a.readLoop()
	go a.decodeLoop()
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

// attachNetRoot attaches the network programs once to the cgroup every call lives under.
func (a *Agent) attachNetRoot() error {
	layout, err := cgroup.Detect()
	if err != nil {
		return err
	}
	root := filepath.Join(layout.V2, cgroup.Root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	return a.net.AttachRoot(root)
}

func (a *Agent) closeLayers() error {
	var errs []error
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

// Journal is where the agent writes.
func (a *Agent) Journal() *journal.Writer { return a.jw }

// Call is one traced tool call.
type Call struct {
	Start  event.CallStart
	cgroup uint64
	slot   uint32

	policy    *CallPolicy
	net       *netguard.CallNet
	lsm       bool
	cgroupDir string
	// killed says why the agent ended the call itself (a fatal syscall was attempted).
	killed string
	// initPID is the sandbox init (the call's first process): its setup is berm's own doing,
	// traced like everything else but not judged as the tool's.
	initPID uint32

	// Owned by the decoder goroutine until End has passed its barrier.
	seq     uint64
	counts  event.Counts
	denials map[string]uint64
	procs   map[uint32]string // pid -> executable
	pending []event.Event
}

// CallOptions say how to trace a call.
type CallOptions struct {
	Traced    []uint32    `json:"traced"`     // syscalls reported one by one
	Policy    *CallPolicy `json:"policy"`     // nil: no policy to attribute denials to
	CgroupDir string      `json:"cgroup_dir"` // the call's cgroup v2 directory, for cgroup hooks
	// Network says the call shares the host's network namespace: the cgroup sock hooks
	// enforce its egress policy, and a call that needs them is refused when they are missing.
	Network bool `json:"network"`
	// InitPID is the sandbox init, already in the cgroup when the call begins: its set-up is
	// berm's, not the tool's, and is not judged.
	InitPID uint32 `json:"init_pid,omitempty"`
}

// Begin starts tracing the cgroup as a call. It must be called before the tool's first
// instruction: the cgroup holds nothing yet, or only the sandbox init waiting for its
// configuration. Then not one instruction of the tool runs untraced.
func (a *Agent) Begin(start event.CallStart, opts CallOptions) (*Call, error) {
	traced := opts.Traced
	start.Layers = append(append([]string(nil), start.Layers...), a.layers...)
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
	c := &Call{Start: start, cgroup: start.CgroupID, slot: uint32(slot), denials: map[string]uint64{}, procs: map[uint32]string{}, policy: opts.Policy, cgroupDir: opts.CgroupDir, initPID: opts.InitPID}
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
	if err := a.jw.AppendCallStart(&c.Start); err != nil {
		return fail(fmt.Errorf("begin call %s: %w", start.CallID, err))
	}
	a.userDrops[slot].Store(0)
	audit := opts.Policy != nil && opts.Policy.audit()
	if err := a.tr.Register(start.CgroupID, tracer.CallConfig{Slot: uint32(slot), Traced: traced, Audit: audit}); err != nil {
		return fail(fmt.Errorf("begin call %s: %w", start.CallID, err))
	}
	if err := a.attachLayers(c, opts); err != nil {
		_ = a.tr.Unregister(start.CgroupID)
		a.detachLayers(c)
		return fail(fmt.Errorf("begin call %s: %w", start.CallID, err))
	}
	a.m.active.Inc()
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
		cn, err := a.net.Attach(opts.CgroupDir, c.cgroup, &p.Compiled.Network, p.audit())
		if err != nil {
			return err
		}
		c.net = cn
	}
	if a.lsm != nil {
		rules := lsm.FromLandlock(p.Compiled.Landlock, uint32(len(p.Compiled.Rules)))
		if err := a.lsm.SetPolicy(c.cgroup, rules...); err != nil {
			return err
		}
		c.lsm = true
	}
	return nil
}

func (a *Agent) detachLayers(c *Call) error {
	var errs []error
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

// killFatal ends a call that attempted a syscall its policy marks fatal. The kill happens
// here, on the event path, a few microseconds after the refused attempt.
func (a *Agent) killFatal(c *Call, name string) {
	if c.killed != "" || c.cgroupDir == "" {
		return
	}
	c.killed = "fatal syscall attempted: " + name + " (spec.syscalls.fatal)"
	if err := cgroup.Kill(c.cgroupDir); err != nil {
		a.log.Error("kill call on fatal syscall", "call_id", c.Start.CallID, "err", err)
	}
}

// UpdateNetwork hot-reloads a running call's egress policy, atomically.
func (a *Agent) UpdateNetwork(c *Call, pol *policy.NetPolicy) error {
	if c.net == nil {
		return fmt.Errorf("call %s has no network layer attached", c.Start.CallID)
	}
	// The kernel's maps are what decide; the judge's copy of the policy belongs to the decoder
	// goroutine and only names raw-socket refusals, which a network reload does not change.
	return c.net.Update(pol)
}

// Emit adds an event observed outside the kernel (a cap hit, a denial by the launcher) to the
// call's stream, in order with its kernel events.
func (a *Agent) Emit(c *Call, ev event.Event) {
	ev.Time = time.Now()
	a.queue <- &batch{cgroup: c.cgroup, user: &ev}
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
}

// End stops tracing the call once every event it produced has gone through the pipeline, and
// writes its record. The launcher calls it after the call's cgroup is empty.
func (a *Agent) End(c *Call, res Result) (*event.CallRecord, error) {
	var errs []error
	if err := a.tr.Unregister(c.cgroup); err != nil {
		errs = append(errs, err)
	}
	if err := a.barrier(5 * time.Second); err != nil {
		errs = append(errs, fmt.Errorf("end call %s: %w", c.Start.CallID, err))
	}
	if err := a.detachLayers(c); err != nil {
		errs = append(errs, err)
	}
	a.mu.Lock()
	delete(a.calls, c.cgroup)
	a.mu.Unlock()

	if c.killed != "" {
		res.Reason, res.Detail = event.EndPolicyKill, c.killed
		res.ExitSignal, res.ExitStatus, res.ExitCode = 9, 137, 0
	}
	rec := &event.CallRecord{
		CallStart: c.Start, End: time.Now(), EndReason: res.Reason, EndDetail: res.Detail,
		ExitStatus: res.ExitStatus, ExitCode: res.ExitCode, ExitSignal: res.ExitSignal,
		Limits: res.Limits, CPUTimeNs: res.CPUTimeNs, PeakMemory: res.PeakMemory, OutputBytes: res.OutputBytes,
		Syscalls: map[string]uint64{}, Denials: c.denials,
	}
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
	rec.Dropped = event.Drop{Kernel: kdrops, User: a.userDrops[c.slot].Swap(0)}
	if rec.Dropped.Kernel > 0 || rec.Dropped.User > 0 {
		d := rec.Dropped
		a.append(c, event.Event{Time: rec.End, Kind: event.KindDrop, Drop: &d})
		a.log.Warn("events dropped", "call_id", c.Start.CallID, "kernel", d.Kernel, "user", d.User)
	}
	if err := a.flush(c); err != nil {
		errs = append(errs, err)
	}
	rec.Counts = c.counts
	rec.Events = c.seq
	if err := a.jw.AppendCallEnd(rec); err != nil {
		a.m.journalErrs.Inc()
		errs = append(errs, err)
	}
	if r := a.rules.Load(); r != nil {
		(*r).EndCall(c.Start.CallID)
	}
	a.mu.Lock()
	a.slots[c.slot] = false
	a.mu.Unlock()
	a.m.active.Dec()
	a.m.calls.WithLabelValues(string(res.Reason)).Inc()
	return rec, errors.Join(errs...)
}

// barrier returns once every event submitted to the ring before it was called has been
// decoded and handed to its call.
func (a *Agent) barrier(timeout time.Duration) error {
	done := make(chan struct{})
	a.barrierMu.Lock()
	a.barriers = append(a.barriers, done)
	a.barrierMu.Unlock()
	if err := a.rd.Flush(); err != nil {
		return fmt.Errorf("flush ring buffer: %w", err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("event pipeline did not drain within %s", timeout)
	}
}

func (a *Agent) lookup(cgroup uint64) *Call {
	a.mu.Lock()
	c := a.calls[cgroup]
	a.mu.Unlock()
	return c
}

// append gives the event its place in the call's stream and runs the subscribers.
func (a *Agent) append(c *Call, ev event.Event) {
	c.seq++
	ev.Seq = c.seq
	ev.CallID, ev.Tool, ev.Tenant = c.Start.CallID, c.Start.Tool, c.Start.Tenant
	c.counts.Add(&ev)
	if ev.Kind == event.KindDenial && ev.Denial != nil {
		c.denials[ev.Denial.Surface]++
	}
	a.m.events.WithLabelValues(string(ev.Kind)).Inc()
	if ev.Kind == event.KindDenial && ev.Denial != nil {
		a.m.denials.WithLabelValues(ev.Denial.Layer, ev.Denial.Surface, auditLabel(ev.Denial.Audit)).Inc()
	}
	// ev is complete now; nested appends below may flush c.pending, so they read ev itself.
	c.pending = append(c.pending, ev)
	// The denial an event shows follows it directly; rules then see both.
	setup := ev.PID != 0 && ev.PID == c.initPID
	if c.policy != nil && !setup && ev.Kind != event.KindDenial && ev.Kind != event.KindAlert {
		if denial := c.policy.judge(&ev); denial != nil {
			d := ev
			d.Kind, d.Denial = event.KindDenial, denial
			d.Exec, d.Fork, d.Exit, d.Open, d.Connect, d.Syscall = nil, nil, nil, nil, nil, nil
			a.append(c, d)
			if ev.Syscall != nil && denial.Layer == "seccomp" && !denial.Audit && c.policy.Compiled.Fatal[ev.Syscall.Nr] {
				a.killFatal(c, ev.Syscall.Name)
			}
		}
	}
	if r := a.rules.Load(); r != nil && !setup && ev.Kind != event.KindAlert {
		for _, al := range (*r).Eval(&ev) {
			a.append(c, al)
		}
	}
	if len(c.pending) >= 1024 {
		if err := a.flush(c); err != nil {
			a.log.Error("journal append failed", "call_id", c.Start.CallID, "err", err)
		}
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
		a.m.journalErrs.Inc()
		return fmt.Errorf("journal events of call %s: %w", c.Start.CallID, err)
	}
	c.pending = c.pending[:0]
	return nil
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

func (a *Agent) flushAll() {
	for _, c := range a.openCalls() {
		if err := a.flush(c); err != nil {
			a.log.Error("journal append failed", "call_id", c.Start.CallID, "err", err)
		}
	}
}

// enrich keeps the call's process tree and names each event's program and parent program.
func (c *Call) enrich(ev *event.Event) {
	switch ev.Kind {
	case event.KindExec:
		c.procs[ev.PID] = ev.Exec.Filename
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
