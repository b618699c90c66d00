// Package sandboxer launches one tool call: its own cgroup (placed there at clone time, so
// not one instruction runs untraced), its own mount, pid, ipc, uts, cgroup and network
// namespaces, resource caps, a private /tmp, the workspace as working directory, a clean
// environment and no_new_privs. At the end every process of the call is killed and its
// cgroup removed.
package sandboxer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// Spec describes one call.
type Spec struct {
	CallID, Tool, Tenant string
	// Node is the node name the call's records carry (empty: the host's name): a node of a
	// fleet names itself (bermd --node), so its calls stay apart from its neighbours'.
	Node string
	// Messages takes berm's own lines about the call (berm run --messages); nil: stderr.
	Messages  io.Writer
	Argv      []string
	Workspace string // bind-mounted read-write, the working directory
	// Env is the tool's whole environment. Who the tool runs as is not the caller's to say: its
	// sandbox's own host ids (uidalloc.go), uid and gid ToolUID/ToolGID inside.
	Env    []string
	Limits event.Limits
	// Policy is the call's ToolPolicy (policy.Strict() by default). It is compiled for this
	// call's workspace before anything starts; a policy that does not compile does not run.
	Policy         *policy.Policy
	Traced         []uint32 // syscalls with individual events, on top of the policy's
	Stdin          *os.File
	Stdout, Stderr io.Writer
	// Terminal is set when Stdin is the master of the call's pty (the caller has a terminal,
	// see callproto.Terminal): the tool gets the pty, its output is read from Stdin.
	Terminal *callproto.Terminal
	// Init is the sandbox init binary: berm-init, or berm itself (re-executed as berm-init).
	Init string
	// Stops end the call early (bermd: the caller's interrupts, its going away). Without
	// them, SIGINT and SIGTERM to this process do.
	Stops <-chan callproto.Stop
	// Pool, when set, may give the call a warm sandbox.
	Pool *Pool
	// PolicyFile, when set, is watched while the call runs: a change to its network section
	// is applied to the running call atomically (other sections apply to the next call).
	PolicyFile string
	// Approvals asks people about the call's held actions; a policy with spec.approvals rules
	// does not run without one (nobody could approve: every gated action would time out).
	Approvals *approval.Broker
	// DNSUpstream overrides the node resolver's upstream for this call (empty: the node's).
	DNSUpstream string
	// CheckWorkspace, when set, is asked about the workspace as it is held open (an O_PATH
	// descriptor, after its resolution) before anything uses it: bermd's check that a caller
	// who is not root names a directory of its own, on the directory the call will get.
	CheckWorkspace func(fd int) error
	// Timeline, when set, is marked at the end of each phase of the launch (bermd's
	// berm_launch_phase_seconds).
	Timeline *Timeline
	// MCPSession and MCPRequestID: the MCP tools/call the call serves (berm mcp serve).
	MCPSession, MCPRequestID string
	// TraceParent is the caller's W3C trace context, recorded in the CallStart (empty: none).
	TraceParent string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName checks a tool, tenant or call id: they name cgroups and files.
func ValidName(field, v string) error {
	if !nameRE.MatchString(v) {
		return fmt.Errorf("%s %q: expected 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit", field, v)
	}
	return nil
}

func (s *Spec) validate() error {
	for _, f := range []struct{ name, v string }{{"call id", s.CallID}, {"tool", s.Tool}, {"tenant", s.Tenant}} {
		if err := ValidName(f.name, f.v); err != nil {
			return err
		}
	}
	if len(s.Argv) == 0 {
		return errors.New("no command to run")
	}
	if s.Policy == nil {
		return errors.New("no policy: every call runs under one (the built-in strict policy by default)")
	}
	l := s.Limits
	if l.MemoryBytes <= 0 || l.Pids <= 0 || l.CPUs <= 0 || l.WallTime <= 0 || l.OutputBytes <= 0 || l.TmpBytes <= 0 {
		return fmt.Errorf("every resource cap must be positive: %+v", l)
	}
	st, err := os.Stat(s.Workspace)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", s.Workspace)
	}
	return nil
}

func (s *Spec) messages() io.Writer {
	if s.Messages != nil {
		return s.Messages
	}
	return os.Stderr
}

// Outcome is a finished call.
type Outcome struct {
	Record     *event.CallRecord
	ExitStatus int // what `berm run` exits with
}

// Run runs the call to its end. The error is about berm (setup, recording); the tool's own
// failure is in the record. Its phases: prepare (the workspace held open, the policy
// compiled, the call id claimed, the disk budget), claimSandbox (warm or started for the
// call), the call's start (its layers), credentials minted, the call begun with the agent,
// then run to its end (runCall) and recorded.
func Run(spec Spec, rec Recorder) (*Outcome, error) {
	p, err := prepare(&spec)
	if err != nil {
		return nil, err
	}
	defer p.close()
	env := p.env
	tl := spec.Timeline
	sb, discard, err := claimSandbox(spec, env, p.wsDir)
	if err != nil {
		return nil, err
	}
	// The sandbox goes with the call: its processes are dead by the time the record is made
	// (launch.run), its cgroups are removed after.
	defer discard()

	ws, err := idmappedTree(p.wsDir, sb, env.wsNoExec)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ws)
	tl.Mark("workspace idmap")

	start := callStart(spec, env, sb)
	// Credentials are minted before the call begins: their values take themselves out of its
	// command line before that is journalled.
	l := &launch{spec: spec, cg: sb.cg, env: env, quota: p.quota, stateDir: rec.StateDir()}
	mintErr := l.mintCredentials()
	for _, c := range l.creds {
		if c.injected() {
			start.Layers = append(start.Layers, event.LayerInject)
			break
		}
	}
	defer l.pending.close()
	defer l.forgetCredentials()
	var argvLeaks []secrets.Literal
	start.Argv, argvLeaks = l.scrubArgv(start.Argv)
	tl.Mark("credentials")
	// A call whose configuration does not depend on its registration (no brokered
	// credentials, no approval channel) is handed to its init first: the init builds the
	// call's root while the agent registers the call, and starts the tool's stage only once
	// finish releases it, after Begin. Every layer is in place before the tool's first
	// instruction either way; the init's own set-up is traced from Begin on.
	var held *delivery
	var heldRes *agent.Result
	// Read before the delivery: one that fails takes the init (and sb.cmd) with it.
	initPID := uint32(sb.cmd.Process.Pid)
	if mintErr == nil && len(l.creds) == 0 && len(env.init.Approvals) == 0 {
		held, heldRes = l.deliver(sb, ws, true)
		tl.Mark("configure init")
	}
	call, err := l.begin(rec, start, sb, held, initPID)
	if err != nil {
		return nil, err
	}
	tl.Mark("registration: bpf maps and layers")
	res := l.runCall(sb, ws, mintErr, argvLeaks, held, heldRes)
	// Whatever ended the call (a cap, a kill, the caller gone), its credentials are revoked
	// now, before its record is written.
	res.Credentials = l.revokeCredentials()
	tl.Mark("cleanup after tool")
	record, err := call.End(res)
	tl.Mark("end: after journal")
	if res.Populated {
		go lingerUntilEmpty(call, l.cg)
	}
	if record == nil {
		return nil, err
	}
	// The record's status: the agent names a fatal syscall's kill (policy_kill) there.
	return &Outcome{Record: record, ExitStatus: record.ExitStatus}, err
}

// prepared is what a call holds before it has a sandbox: its workspace open, its compiled
// policy, its call id claimed and its disk budget.
type prepared struct {
	wsDir   *workspaceDir
	env     *callEnv
	release func()
	quota   *callQuota
}

// prepare validates the call (spec's workspace becomes the path resolved and held open) and
// takes what it holds before its sandbox. On an error nothing is left held.
func prepare(spec *Spec) (_ *prepared, err error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	p := &prepared{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.wsDir, err = openWorkspaceDir(spec.Workspace, deniedTrees(spec.Policy)); err != nil {
		return nil, err
	}
	if spec.CheckWorkspace != nil {
		if err := spec.CheckWorkspace(p.wsDir.fd); err != nil {
			return nil, fmt.Errorf("workspace %s: %w", spec.Workspace, err)
		}
	}
	spec.Timeline.Mark("workspace open")
	if p.wsDir.Path != spec.Workspace {
		spec.Env = retargetHome(spec.Env, spec.Workspace, p.wsDir.Path)
		spec.Workspace = p.wsDir.Path
	}
	if p.env, err = compile(spec); err != nil {
		return nil, err
	}
	spec.Timeline.Mark("policy compile")
	if p.env.compiled.Approvals != nil && spec.Approvals == nil {
		return nil, errors.New("the policy holds actions for approval (spec.approvals) and this launcher has no one to ask")
	}
	if p.release, err = claimCallID(spec.Tenant, spec.CallID); err != nil {
		return nil, err
	}
	if p.quota, err = newCallQuota(spec.Workspace, p.env.compiled); err != nil {
		return nil, err
	}
	spec.Timeline.Mark("call id and disk quota")
	return p, nil
}

// close lets go of what prepare took, last taken first.
func (p *prepared) close() {
	if p.quota != nil {
		p.quota.close()
	}
	if p.release != nil {
		p.release()
	}
	if p.wsDir != nil {
		p.wsDir.Close()
	}
}

// claimSandbox gives the call a sandbox: a warm one of the pool when the call can take one,
// else one started for it. discard ends the sandbox with the call: a launcher serving callers
// (a pool) retires it once the caller has its reply, one that exits after the call discards it
// before it exits; a warm sandbox's pool then starts its replacement.
func claimSandbox(spec Spec, env *callEnv, wsDir *workspaceDir) (sb *sandbox, discard func(), err error) {
	lim := cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, CPUs: spec.Limits.CPUs}
	if env.init.NewNet && !env.init.HostRoot {
		// audit mode shows the host's root: a warm init is inside the root it prepared
		sb = spec.Pool.take(spec.Tenant, env.init.Root, wsDir.UID, wsDir.GID, spec.Timeline)
	}
	tl := spec.Timeline
	refill := func() {}
	if sb != nil {
		spec.Pool.Warm.Add(1)
		tl.setWarm()
		refill = func() { spec.Pool.refillAfter(spec.Tenant) }
		if err := sb.cg.SetLimits(lim); err != nil {
			_ = sb.discard()
			refill()
			return nil, nil, err
		}
		tl.Mark("cgroup limits")
	} else {
		if spec.Pool != nil {
			spec.Pool.Cold.Add(1)
		}
		// Calls whose launcher was killed left their (empty) cgroups behind: clear them. A
		// launcher with a pool (bermd) does it beside its calls, at most once a second (each
		// look opens every call's lease: a burst's cold launches each looking was quadratic);
		// one that exits after its call does it first.
		if spec.Pool != nil {
			spec.Pool.reapStale()
		} else if _, err := cgroup.ReapStale(); err != nil {
			fmt.Fprintf(spec.messages(), "berm: warning: stale calls: %v\n", err)
		}
		tl.Mark("reap stale cgroups")
		layout, err := hostLayout()
		if err != nil {
			return nil, nil, err
		}
		if sb, err = startSandbox(layout, spec.Init, spec.Tenant, spec.CallID, lim, env.init.NewNet, nil, &[2]uint32{wsDir.UID, wsDir.GID}, tl); err != nil {
			return nil, nil, err
		}
	}
	return sb, func() {
		if spec.Pool != nil {
			spec.Pool.retire(sb)
		} else {
			_ = sb.discard()
		}
		refill()
	}, nil
}

// callStart is the call's start record: who, what, under which policy, and the layers the
// launcher puts in place (the agent adds its own, tracing, cgroup sock hooks, BPF LSM, when it
// begins).
func callStart(spec Spec, env *callEnv, sb *sandbox) event.CallStart {
	host := spec.Node
	if host == "" {
		host, _ = os.Hostname()
	}
	layers := []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs}
	if !env.init.HostRoot {
		layers = append(layers, event.LayerMount)
	}
	abi := 0
	if env.init.Landlock != nil {
		layers = append(layers, event.LayerLandlock)
		abi = env.compiled.LandlockABI
	}
	if len(env.init.Seccomp) > 0 {
		layers = append(layers, event.LayerSeccomp)
	}
	if len(env.init.Approvals) > 0 {
		layers = append(layers, event.LayerApproval)
	}
	// Every call: a clean environment, only brokered credentials, output scanned and redacted
	// (credentials.go; the agent's registry scans every call for its neighbours' secrets).
	layers = append(layers, event.LayerCredentials)
	return event.CallStart{
		CallID: spec.CallID, Tool: spec.Tool, Tenant: spec.Tenant, Argv: spec.Argv,
		Policy: env.compiled.Name, PolicyHash: env.hash, Mode: string(env.compiled.Mode), Start: time.Now(), CgroupID: sb.cg.ID,
		Node: host, Layers: layers, LandlockABI: abi, TraceParent: spec.TraceParent,
		MCPSession: spec.MCPSession, MCPRequestID: spec.MCPRequestID,
	}
}

// begin registers the call with the agent. On an error the call's credentials are revoked and
// a held init, waiting for a release that will not come, goes with its sandbox.
func (l *launch) begin(rec Recorder, start event.CallStart, sb *sandbox, held *delivery, initPID uint32) (CallRecorder, error) {
	env := l.env
	call, err := rec.Begin(start, agent.CallOptions{
		Traced: env.traced, RefusalsOnly: env.refusalsOnly, Policy: env.compiled, Judge: env.judge, CgroupDir: sb.cg.V2,
		Network: env.compiled.Isolation == policy.NetworkHostFiltered, InitPID: initPID, InitExe: initExe(l.spec.Init), StageExe: sandboxinit.StageBinary,
		EventBudget: env.compiled.EventBudget, DNSUpstream: l.spec.DNSUpstream, Redact: env.redact, Mark: l.spec.Timeline.marker(),
	})
	if err != nil {
		l.revokeCredentials()
		if held != nil {
			held.close()
			_ = l.cg.KillAndWait(5 * time.Second)
		}
		return nil, err
	}
	l.call, l.callKey = call, call.Key()
	return call, nil
}

// runCall runs a begun call to its end: its credentials issued and their revokes on disk
// first; a failure there ends it before the tool starts.
func (l *launch) runCall(sb *sandbox, ws int, mintErr error, argvLeaks []secrets.Literal, held *delivery, heldRes *agent.Result) agent.Result {
	if mintErr == nil {
		mintErr = l.issueCredentials(l.call.Secrets(), argvLeaks)
	}
	if mintErr == nil {
		mintErr = l.persistRevokes()
	}
	switch {
	case mintErr != nil:
		// Before the tool starts: the sandbox's init, waiting for its call, goes with it.
		_ = l.cg.KillAndWait(5 * time.Second)
		return agent.Result{Limits: l.spec.Limits, Reason: event.EndSetupFailed, Detail: mintErr.Error(), ExitStatus: 125}
	case heldRes != nil:
		return *heldRes
	case held != nil:
		return l.finish(held)
	}
	return l.run(sb, ws)
}

// running are the calls this process runs, by tenant and call id: a warm sandbox's cgroup is
// not named after its call, so its name cannot refuse a second call with the same id.
var running = struct {
	sync.Mutex
	ids map[string]bool
}{ids: map[string]bool{}}

// hostLayout is the host's cgroup layout, read once: it does not change under a running berm.
var hostLayout = sync.OnceValues(cgroup.Detect)

func claimCallID(tenant, callID string) (func(), error) {
	key := tenant + "/" + callID
	taken := fmt.Errorf("call id %s of tenant %s is taken (a call with this id runs; call ids must be unique)", callID, tenant)
	running.Lock()
	defer running.Unlock()
	if running.ids[key] {
		return nil, taken
	}
	if l, err := hostLayout(); err == nil {
		if _, err := os.Stat(filepath.Join(l.V2, cgroup.Root, tenant, callID)); err == nil {
			return nil, taken
		}
	}
	running.ids[key] = true
	return func() {
		running.Lock()
		delete(running.ids, key)
		running.Unlock()
	}, nil
}

type launch struct {
	spec Spec
	cg   *cgroup.Cgroup
	call CallRecorder
	env  *callEnv
	// quota is the call's disk budget and leftover scan on its workspace.
	quota *callQuota
	// creds are the call's brokered credentials (credentials.go); callKey names the call.
	creds   []*issued
	callKey string
	// pending: the call's revokes on disk while it runs, for a launcher that outlives a crash
	// (written in stateDir, the node's, before the first mint)
	pending  *pendingRevokes
	stateDir string

	// sup is the call's approval supervisor once it runs: told first why berm ends the call,
	// so a request the end abandons says why.
	sup atomic.Pointer[approval.Supervisor]

	mu     sync.Mutex
	reason event.EndReason // first cap or interruption that ended the call
	detail string
	output atomic.Int64
}

// stop ends the call for a reason of berm's (a cap, an interruption), once.
func (l *launch) stop(reason event.EndReason, detail string, lim *event.Limit) {
	l.mu.Lock()
	first := l.reason == ""
	if first {
		l.reason, l.detail = reason, detail
	}
	l.mu.Unlock()
	if !first {
		return
	}
	if lim != nil {
		l.call.Emit(event.Event{Kind: event.KindLimit, Limit: lim})
	}
	if sup := l.sup.Load(); sup != nil {
		sup.Ending(detail)
	}
	_ = l.cg.Kill()
}

// delivery is a call handed to its sandbox's init (deliver) and not yet waited for (finish).
type delivery struct {
	sb         *sandbox
	out, errR  *os.File // the tool's stdout and stderr; the copiers close them
	termOut    *os.File // the pty's master, when the call has a terminal
	ownedStdin *os.File // /dev/null opened for a call without stdin
	held       bool     // the init waits for release before the tool's stage starts
}

// run hands the sandbox its call and waits for the end. ws is the workspace's detached mount.
func (l *launch) run(sb *sandbox, ws int) agent.Result {
	d, res := l.deliver(sb, ws, false)
	if res != nil {
		return *res
	}
	return l.finish(d)
}

// failSetup ends a call that could not be set up.
func (l *launch) failSetup(err error) agent.Result {
	_ = l.cg.KillAndWait(5 * time.Second)
	return agent.Result{Limits: l.spec.Limits, Reason: event.EndSetupFailed, Detail: err.Error(), ExitStatus: 125}
}

// abortInit ends a call whose init started but could not be set up (copiers: wait for them
// first, when they were started).
func (l *launch) abortInit(sb *sandbox, err error, copiers *sync.WaitGroup) agent.Result {
	_ = sb.cmd.Process.Kill()
	_ = sb.cmd.Wait()
	sb.cmd = nil
	if copiers != nil {
		copiers.Wait()
	}
	// An init that gave up on its own said why: that is the cause, not the closed pipe.
	var st sandboxinit.Status
	if data, _ := io.ReadAll(sb.stat); json.Unmarshal(data, &st) == nil && st.Error != "" {
		err = fmt.Errorf("%w: sandbox init: %s", err, st.Error)
	}
	return l.failSetup(err)
}

// close releases what a delivery that will not be finished holds.
func (d *delivery) close() {
	for _, f := range []*os.File{d.out, d.errR, d.termOut, d.ownedStdin} {
		if f != nil {
			f.Close()
		}
	}
}

// deliver hands the sandbox's init its call. hold: the init builds the call's root and waits
// for finish's release before the tool's stage starts, so the launcher can register the call
// with the agent meanwhile (nothing of the call's configuration may depend on the
// registration: no brokered credentials, no approval channel). The output copiers start in
// finish, once the call is registered (the redactors report to it). A non-nil result is the
// end of a call that could not be set up.
func (l *launch) deliver(sb *sandbox, ws int, hold bool) (*delivery, *agent.Result) {
	spec := l.spec
	d := &delivery{sb: sb, out: sb.out, errR: sb.errR, held: hold}
	sb.out, sb.errR = nil, nil
	abort := func(err error) (*delivery, *agent.Result) {
		d.close()
		res := l.abortInit(sb, err, nil)
		return nil, &res
	}
	var err error
	stdin := spec.Stdin
	if stdin == nil {
		if stdin, err = os.Open(os.DevNull); err != nil {
			return abort(err)
		}
		d.ownedStdin = stdin
	}
	var term *terminal
	if spec.Terminal != nil {
		if term, err = openTerminal(stdin); err != nil {
			return abort(err)
		}
		d.termOut, term.out = term.out, nil
		stdin = term.pty
	}
	cfg := l.env.init
	cfg.Hold = hold
	err = sb.configure(&cfg, stdin, ws, term.config(&cfg, spec.Terminal)...)
	term.close()
	if d.ownedStdin != nil {
		d.ownedStdin.Close()
		d.ownedStdin = nil
	}
	if err != nil {
		return abort(err)
	}
	return d, nil
}

// finish lets a held init go on, then waits for the call's end: the output copied, the
// approval supervisor and the watcher running while the tool does (until the init reports
// its end), then the call cleared, measured and its end told (endReason, endStatus).
func (l *launch) finish(d *delivery) agent.Result {
	spec := l.spec
	sb := d.sb
	res := agent.Result{Limits: spec.Limits}
	copiers := l.copyOutputs(d)
	if d.held {
		if err := sb.release(); err != nil {
			return l.abortInit(sb, err, copiers)
		}
	}
	spec.Timeline.Mark("release init")
	cmd := sb.cmd
	l.delivered(cmd.Process.Pid)
	supervisor := l.startSupervisor(sb)

	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		l.watch(cmd.Process.Pid, done)
	}()
	if spec.PolicyFile != "" {
		go l.reloadPolicy(done)
	}
	st, waitErr := waitForTool(sb)
	spec.Timeline.Mark("init set-up, tool and reap")
	close(done)
	// The watcher's last look is over before the reason is read: a cap it found as the tool
	// ended is recorded once, as the call's reason, not found again below.
	<-watched
	l.endSupervisor(supervisor)

	// Whatever the tool left behind (daemons, setsid grandchildren) goes now, when the init
	// did not already see to it. What cannot be killed stays registered with the agent
	// (traced, and judged by the kernel layers that fail closed) until it is gone: see
	// lingerUntilEmpty.
	if !st.Reaped {
		if err := l.cg.KillAndWait(10 * time.Second); err != nil {
			res.Detail = err.Error()
			res.Populated = true
		}
	}
	copiers.Wait()
	ev := l.cg.Events()
	stats := l.cg.Stats()
	res.CPUTimeNs, res.PeakMemory, res.OutputBytes = stats.CPUTimeNs, stats.PeakMemory, l.output.Load()

	l.mu.Lock()
	reason, detail := l.reason, l.detail
	l.mu.Unlock()
	// A cap hit faster than the watcher looks (every 20 ms) still ends the call with its reason;
	// the tool's own status stands (berm did not kill it). The call's /tmp is not looked at
	// again: the init's root may be gone.
	late := reason == ""
	if late {
		look := capLook{cg: ev}
		look.disk, look.diskLimit = l.quota.exceeded()
		if hit, ok := endReason(look, spec.Limits); ok {
			reason, detail = hit.reason, hit.detail
			l.call.Emit(event.Event{Kind: event.KindLimit, Limit: hit.limit})
		}
	}
	return endStatus(res, reason, detail, late, st, waitErr)
}

// copyOutputs starts copying the tool's stdout, stderr and terminal to the caller, each
// through its redactor; the delivery's files are the copiers' from here on.
func (l *launch) copyOutputs(d *delivery) *sync.WaitGroup {
	spec := l.spec
	var copiers sync.WaitGroup
	copiers.Add(2)
	go l.copyOutput(&copiers, d.out, l.redactor("stdout", spec.Stdout))
	go l.copyOutput(&copiers, d.errR, l.redactor("stderr", spec.Stderr))
	if d.termOut != nil {
		echo := spec.Stdout
		if !spec.Terminal.Stdout && spec.Terminal.Stderr {
			echo = spec.Stderr
		}
		copiers.Add(1)
		go l.copyOutput(&copiers, d.termOut, l.redactor("terminal", echo))
	}
	d.out, d.errR, d.termOut = nil, nil, nil
	return &copiers
}

// startSupervisor starts the call's approval supervisor, when its policy holds actions. The
// approval listener arrives from the init just before the tool executes; the init closes the
// channel without one when the tool did not start (or at its end), so this never outlives the
// call. Nil: no approvals.
func (l *launch) startSupervisor(sb *sandbox) chan *approval.Supervisor {
	if len(l.env.init.Approvals) == 0 {
		return nil
	}
	supervisor := make(chan *approval.Supervisor, 1)
	fd := sb.cfg
	sb.cfg = -1
	go func() {
		sup := l.supervise(fd, sb)
		if sup != nil {
			l.sup.Store(sup)
		}
		supervisor <- sup
	}()
	return supervisor
}

// endSupervisor ends the requests still waiting with the call, saying why.
func (l *launch) endSupervisor(supervisor chan *approval.Supervisor) {
	if supervisor == nil {
		return
	}
	if sup := <-supervisor; sup != nil {
		l.mu.Lock()
		why := l.detail
		l.mu.Unlock()
		if why == "" {
			why = "the tool ended"
		}
		sup.End(why)
	}
}

// waitForTool waits for the init's report of the tool's end. The init reports it before its
// own: with every other process of the call reaped (Reaped), the call ends now and the init's
// exit (its runtime, the namespaces' teardown) goes on beside it; the sandbox's discard waits
// for it. Otherwise (the init died, or something stayed), the init's exit is waited for first.
func waitForTool(sb *sandbox) (st sandboxinit.Status, waitErr error) {
	if err := json.NewDecoder(sb.stat).Decode(&st); err != nil || !st.Reaped {
		waitErr = sb.cmd.Wait()
		sb.cmd = nil
	}
	return st, waitErr
}

// capLook is one look at a call's caps: its cgroup's events, its /tmp's file system (zero when
// not looked at, or not there) and its disk budget (disk and diskLimit when exceeded).
type capLook struct {
	cg        cgroup.Events
	tmp       unix.Statfs_t
	disk      string
	diskLimit *event.Limit
}

// capHit is a cap that ends a call: its end reason, what to say, the limit event to record.
type capHit struct {
	reason event.EndReason
	detail string
	limit  *event.Limit
}

// endReason is the first cap a look finds the call over, in this order: memory (an OOM kill),
// processes (a refused fork), /tmp's bytes, /tmp's inodes, the workspace's disk budget. The
// watcher asks it every tick, and finish once more when the call ended before the watcher
// saw a cap.
func endReason(look capLook, lim event.Limits) (capHit, bool) {
	fs := look.tmp
	switch {
	case look.cg.OOMKills > 0:
		return capHit{event.EndMemoryLimit, fmt.Sprintf("memory cap of %d bytes", lim.MemoryBytes),
			&event.Limit{Resource: event.ResourceMemory, Limit: lim.MemoryBytes}}, true
	case look.cg.PidsMax > 0:
		return capHit{event.EndPidsLimit, fmt.Sprintf("process cap of %d", lim.Pids),
			&event.Limit{Resource: event.ResourcePids, Limit: lim.Pids, Detail: fmt.Sprintf("%d forks refused", look.cg.PidsMax)}}, true
	case fs.Type == unix.TMPFS_MAGIC && fs.Blocks > 0 && fs.Bavail == 0:
		return capHit{event.EndTmpLimit, fmt.Sprintf("/tmp cap of %d bytes", lim.TmpBytes),
			&event.Limit{Resource: event.ResourceTmp, Limit: lim.TmpBytes}}, true
	case fs.Type == unix.TMPFS_MAGIC && fs.Files > 0 && fs.Ffree == 0:
		return capHit{event.EndTmpLimit, fmt.Sprintf("/tmp cap of %d inodes", fs.Files),
			&event.Limit{Resource: event.ResourceTmpInodes, Limit: int64(fs.Files)}}, true
	case look.diskLimit != nil:
		return capHit{event.EndDiskLimit, look.disk, look.diskLimit}, true
	}
	return capHit{}, false
}

// endStatus completes a call's result from why berm ended it (reason, empty when it did not;
// late when a cap was found only after the tool ended) and the init's report of the tool's end
// (waitErr: the init's exit, when it said nothing).
func endStatus(res agent.Result, reason event.EndReason, detail string, late bool, st sandboxinit.Status, waitErr error) agent.Result {
	switch {
	case reason != "":
		// berm killed the tool: the status says so (event.EndedStatus), distinct from a tool
		// that died of SIGKILL on its own; the record keeps the tool's SIGKILL.
		res.Reason, res.Detail = reason, detail
		status, ok := event.EndedStatus(reason)
		if !ok {
			status = 128 + int(unix.SIGKILL)
		}
		res.ExitSignal, res.ExitStatus = int(unix.SIGKILL), status
		switch {
		case st.Exited && (late || reason == event.EndInterrupted || reason == event.EndClientLost):
			res.ExitSignal, res.ExitCode, res.ExitStatus = 0, st.Code, st.Code
		case late && st.Signal != 0:
			res.ExitSignal, res.ExitStatus = st.Signal, 128+st.Signal
			if reason == event.EndMemoryLimit && st.Signal == int(unix.SIGKILL) {
				// The memory cap's OOM killer killed the tool: the cap ended the call.
				res.ExitStatus = status
			}
		}
	case st.Error != "" && !st.Started:
		res.Reason, res.Detail = event.EndSetupFailed, st.Error
		res.ExitCode, res.ExitStatus = st.Code, st.Code
		if res.ExitStatus == 0 {
			res.ExitStatus = 125
		}
	case st.Signal != 0:
		res.Reason, res.ExitSignal, res.ExitStatus = event.EndSignal, st.Signal, 128+st.Signal
		res.Detail = unix.SignalName(syscall.Signal(st.Signal))
	case st.Exited:
		res.Reason, res.ExitCode, res.ExitStatus = event.EndExit, st.Code, st.Code
	default:
		// The init died without a word: killed from outside.
		res.Reason, res.ExitSignal, res.ExitStatus = event.EndSignal, int(unix.SIGKILL), 128+int(unix.SIGKILL)
		res.Detail = fmt.Sprintf("sandbox init ended without a status: %v", waitErr)
	}
	return res
}

func (l *launch) copyOutput(wg *sync.WaitGroup, r *os.File, w io.Writer) {
	defer wg.Done()
	defer r.Close()
	if rd, ok := w.(*secrets.Redactor); ok {
		// What it held back (a tail that could have started a secret) goes at the end.
		defer rd.Close()
	}
	buf := make([]byte, 32<<10)
	limit := l.spec.Limits.OutputBytes
	for {
		n, err := r.Read(buf)
		if n > 0 {
			total := l.output.Add(int64(n))
			if over := total - limit; over > 0 {
				// Pass through what fits, then stop the call.
				if keep := int64(n) - over; keep > 0 && w != nil {
					_, _ = w.Write(buf[:keep])
				}
				l.stop(event.EndOutputLimit, fmt.Sprintf("output cap of %d bytes", limit),
					&event.Limit{Resource: event.ResourceOutput, Limit: limit})
				_, _ = io.Copy(io.Discard, r)
				return
			}
			if w != nil {
				_, _ = w.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// watch enforces the caps the kernel does not end a call for: wall time, a refused fork, an
// OOM kill of one process, a full /tmp, the workspace's disk budget; and turns SIGINT/SIGTERM
// into an orderly end.
func (l *launch) watch(initPid int, done <-chan struct{}) {
	lim := l.spec.Limits
	timer := time.NewTimer(lim.WallTime)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// A launcher serving a caller (bermd) hears from it; one run by the caller, from signals.
	stops := l.spec.Stops
	sigs := make(chan os.Signal, 1)
	if stops == nil {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	tmp := "/proc/" + strconv.Itoa(initPid) + "/root/tmp"
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			l.stop(event.EndInterrupted, "berm run received "+s.String(), nil)
		case st := <-stops:
			if st.MCP != nil {
				// Not a stop: a request the client's MCP proxy relayed to the call's server.
				m := *st.MCP
				l.call.Emit(event.Event{Kind: event.KindMCP, MCP: &m})
				continue
			}
			l.stop(st.Reason, st.Detail, nil)
		case <-timer.C:
			l.stop(event.EndTimeout, fmt.Sprintf("wall-time cap of %s", lim.WallTime),
				&event.Limit{Resource: event.ResourceWallTime, Limit: int64(lim.WallTime)})
		case <-tick.C:
			look := capLook{cg: l.cg.Events()}
			if unix.Statfs(tmp, &look.tmp) != nil {
				look.tmp = unix.Statfs_t{}
			}
			look.disk, look.diskLimit = l.quota.exceeded()
			if hit, ok := endReason(look, lim); ok {
				l.stop(hit.reason, hit.detail, hit.limit)
			}
		}
	}
}

// initExe is the file name the init's binary runs under, as the kernel names an exec of it.
func initExe(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	return filepath.Base(path)
}
