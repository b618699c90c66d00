package approval

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/secrets"
)

// CallInfo is what the supervisor knows of its call.
type CallInfo struct {
	CallID, CallKey, Tenant, Tool string
	// HostUID and HostGID are the tool's ids on the host: the supervisor acts as them.
	HostUID, HostGID uint32
	// Landlock is the tool's file system ruleset: the supervisor's acting thread takes it too,
	// so an approved action can do nothing the tool could not have done itself.
	Landlock *landlock.Ruleset
}

// SupervisorConfig configures one call's supervisor.
type SupervisorConfig struct {
	Listener *os.File // the approval filter's listener, from the sandbox init; the supervisor owns it
	Broker   *Broker
	Call     CallInfo
	Rules    *policy.CompiledApprovals
	// Emit adds an event to the call's trail (the call's recorder).
	Emit func(event.Event)
	Log  *slog.Logger
	// ConnectInet connects the tool's inet socket (a duplicate the supervisor owns) to addr
	// from inside the call's cgroup (the sandbox init does it), so the bpf-cgroup-sock egress
	// layer judges the connect as the call's. Required when the rules hold connects.
	ConnectInet func(sock int, addr []byte) unix.Errno
	// Exec is the call's exec gate in the kernel. Required when the rules hold execs.
	Exec ExecGate
	// Done is called at End, once no handler runs any more.
	Done func()
	// Redact are the policy's output patterns (spec.output.redact): what matches them in an
	// object is redacted in the request (the prompt, the API, the webhook, the log) and in
	// the call's events, with an alert per pattern (redact.go).
	Redact []secrets.Pattern
}

// Supervisor answers one call's gated syscalls.
type Supervisor struct {
	cfg   SupervisorConfig
	fd    int
	stopR *os.File
	stopW *os.File
	ended chan struct{}
	once  sync.Once
	loop  sync.WaitGroup
	work  sync.WaitGroup
	// slots bound the notifications handled at once: each holds a thread of this process
	// (and a pending request may hold it for the whole timeout). Past the bound the loop
	// stops receiving and the call's further gated syscalls wait in the kernel, costing the
	// agent nothing; a call cannot exhaust the agent's threads.
	slots chan struct{}

	mu sync.Mutex
	// covered is what is left of each rule's last approval (ApprovalRule.Count actions).
	covered map[string]int64
	// denied are the actions denied in this call, by action and object, with when: asking
	// again within the rules' RetryWindow is a retry storm, denied at once.
	denied map[string]time.Time
	reason string // why the call ended, for requests it abandons
	// execIDs are the exec rules' programs in the call's root, gated in the kernel (exec.go);
	// nil until the first exec is held.
	execIDs map[*policy.ApprovalRule]fileID
	// loaders are the gated programs' dynamic loaders (gated too: run directly, refused).
	loaders map[fileID]string
	// roots are the path rules' trees' roots by identity, taken at the first held path
	// syscall (trees.go); nil until then.
	roots map[*policy.ApprovalRule]treeRoot
	// rootsMissing counts the path rules whose root did not exist yet at the last look.
	rootsMissing int
	// mounts is the tool's mount table when it holds a slow file system (slowfs.go), read at
	// the call's first held path syscall (mountsRead).
	mounts     *mountTable
	mountsRead bool
	// searches are threads whose gated exec was just denied, by thread id: their shell's
	// PATH search is the same action (pathsearch.go).
	searches map[uint32]*pathSearch

	// redactSeen are the patterns already alerted on (redact.go), under its own lock: events
	// are emitted with mu held or not.
	redactMu   sync.Mutex
	redactSeen map[string]bool
}

// MaxInFlight bounds the held syscalls one call's supervisor handles at once.
const MaxInFlight = 32

// Supervise starts answering the call's notifications.
func Supervise(cfg SupervisorConfig) (*Supervisor, error) {
	if cfg.Listener == nil || cfg.Broker == nil || cfg.Rules == nil || cfg.Emit == nil {
		return nil, errors.New("approval supervisor: listener, broker, rules and emit are required")
	}
	if cfg.Rules.Has(policy.ApproveExec) && cfg.Exec == nil {
		return nil, errors.New("approval supervisor: exec rules need the kernel's exec gate")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, fd: int(cfg.Listener.Fd()), stopR: r, stopW: w, ended: make(chan struct{}), slots: make(chan struct{}, MaxInFlight),
		covered: map[string]int64{}, denied: map[string]time.Time{}, loaders: map[fileID]string{}, searches: map[uint32]*pathSearch{}}
	s.loop.Add(1)
	go s.run()
	return s, nil
}

// EndGrace bounds how long End waits for the handlers still at work. Requests waiting for a
// person end at once with the call; what a handler performs does not wait (a write-open never
// blocks: openNoBlock), so they are done well within it. One that is not (a unix socket's
// connect waiting for its peer's accept) is left to end by itself, and the listener stays
// open until it has (its number must not be reused under it): the call's end does not wait
// for it.
const EndGrace = 500 * time.Millisecond

// End is the call's end: requests still waiting end with reason (the call's end reason), the
// loop stops and the listener closes. The call's processes are gone by then. End returns
// within EndGrace of the loop's stop, whatever a handler does.
func (s *Supervisor) End(reason string) {
	s.once.Do(func() {
		s.Ending(reason)
		close(s.ended)
		s.stopW.Write([]byte{1})
		s.loop.Wait()
		idle := make(chan struct{})
		go func() {
			s.work.Wait()
			close(idle)
		}()
		release := func() {
			s.stopR.Close()
			s.stopW.Close()
			s.cfg.Listener.Close()
			if s.cfg.Done != nil {
				s.cfg.Done()
			}
		}
		t := time.NewTimer(EndGrace)
		defer t.Stop()
		select {
		case <-idle:
			release()
		case <-t.C:
			s.cfg.Log.Warn("approval supervisor: a handler still at work at the call's end: left to end by itself", "call", s.cfg.Call.CallID)
			go func() {
				<-idle
				release()
			}()
		}
	})
}

// Ending says why the call is about to be ended (a cap, an interruption): requests its end
// abandons carry the reason.
func (s *Supervisor) Ending(reason string) {
	s.mu.Lock()
	if s.reason == "" {
		s.reason = reason
	}
	s.mu.Unlock()
}

func (s *Supervisor) run() {
	defer s.loop.Done()
	for {
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(s.stopR.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			s.cfg.Log.Error("approval listener poll", "call", s.cfg.Call.CallID, "err", err)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			select {
			case s.slots <- struct{}{}:
			case <-s.ended:
				return
			}
			n, err := recvNotif(s.fd)
			if err != nil {
				<-s.slots
			}
			if err == unix.ENOENT {
				continue // its thread died (or was interrupted) before we took it
			}
			if err != nil {
				s.cfg.Log.Error("approval listener receive", "call", s.cfg.Call.CallID, "err", err)
				return
			}
			s.work.Add(1)
			go s.handle(n)
			continue
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
			return // no task of the call has the filter any more
		}
	}
}

// op is one held syscall, read and resolved.
type op struct {
	n       *notif
	tgid    int
	name    string // the syscall
	action  string // policy.Approve*
	object  string // what a person is asked about
	paths   []string
	rule    *policy.ApprovalRule
	perform func() (int64, unix.Errno) // the action itself, on validated arguments
	cleanup []func()
	jailed  bool     // the thread took the tool's root, ids and domain (or tried to): never reused
	exec    *execTry // a gated program's exec: what it is, for a PATH search (pathsearch.go)
	absent  bool     // an exec of no file (ENOENT): a PATH search's miss, nothing runs
	// inode is the object's device and inode (a path syscall's first path, not following
	// a last link; "" for none yet), taken from its resolved directory (inodeKnown).
	inode      string
	inodeKnown bool
}

func (o *op) close() {
	for _, f := range o.cleanup {
		f()
	}
}

// handle answers one notification. Its goroutine is locked to its thread and never unlocked:
// the thread takes the call's root, ids and Landlock domain (jail), and the runtime retires it
// when the goroutine returns instead of reusing it for anything else.
func (s *Supervisor) handle(n *notif) {
	defer s.work.Done()
	defer func() { <-s.slots }()
	runtime.LockOSThread()
	name := event.SyscallName(uint32(n.Data.Nr))
	o := &op{n: n, name: name}
	defer func() {
		// A thread that never took the tool's root, ids and Landlock domain goes back to the
		// runtime (an exec by absolute path: exec.go); a jailed one is retired with its
		// goroutine.
		if !o.jailed {
			runtime.UnlockOSThread()
		}
	}()
	defer o.close()
	errno := s.prepare(o)
	if errno == 0 && !idValid(s.fd, n.ID) {
		return // its thread is gone: what was read may be another process's memory
	}
	if errno != 0 {
		s.reply(o, 0, errno)
		return
	}
	if o.action == policy.ApproveExec && o.rule == nil && !o.absent {
		s.mu.Lock()
		s.continuesSearch(o.n.PID, nil, time.Time{}) // another program: the thread's search is over
		s.mu.Unlock()
	}
	if o.rule == nil {
		// No rule gates it: the supervisor still performs it (the kernel must not re-read the
		// pointer it was checked on), at once.
		v, e := o.perform()
		s.reply(o, v, e)
		return
	}
	s.gated(o)
}

func (s *Supervisor) reply(o *op, val int64, errno unix.Errno) {
	if val == fdInstalled {
		return // answered by ADDFD
	}
	if val == execContinue {
		if err := answerContinue(s.fd, o.n.ID); err != nil && err != unix.ENOENT {
			s.cfg.Log.Warn("approval answer", "call", s.cfg.Call.CallID, "syscall", o.name, "err", err)
		}
		return
	}
	if err := answer(s.fd, o.n.ID, val, errno); err != nil && err != unix.ENOENT {
		s.cfg.Log.Warn("approval answer", "call", s.cfg.Call.CallID, "syscall", o.name, "err", err)
	}
}

// gated asks about a rule's action and answers it.
func (s *Supervisor) gated(o *op) {
	r := o.rule
	key := o.action + "\x00" + o.object
	base := event.Approval{Action: o.action, Syscall: o.name, Object: o.object, Rule: r.Name, Approvers: r.Approvers}
	s.mu.Lock()
	var search *pathSearch
	same := false
	if o.action == policy.ApproveExec {
		search, same = s.continuesSearch(o.n.PID, o.exec, time.Now())
	}
	at, repeat := s.denied[key]
	repeat = !same && repeat && time.Since(at) < s.cfg.Rules.RetryWindow
	covered := !same && !repeat && s.covered[r.Name] > 0
	if covered {
		s.covered[r.Name]--
	}
	s.mu.Unlock()
	switch {
	case same:
		a := base
		a.ID, a.Outcome, a.Channel, a.Result = search.reqID, SameAction, ChannelBroker, -int64(unix.EPERM)
		stands := "the " + search.outcome + " of request " + search.reqID
		if search.reqID == "" {
			stands = "its deny as a repeat"
		}
		a.Reason = fmt.Sprintf("the same exec again by the same thread under another path (a PATH search, try %d): %s stands", search.n+1, stands)
		_ = s.cfg.Exec.Revoke(o.n.PID)
		s.emit(o, &a)
		s.emitDenial(o)
		s.reply(o, 0, unix.EPERM)
		return
	case repeat:
		s.cfg.Broker.Repeat()
		a := base
		a.Outcome, a.Channel, a.Result = Repeated, ChannelBroker, -int64(unix.EPERM)
		a.Reason = fmt.Sprintf("asked again %s after its deny (retry window %s)", time.Since(at).Round(time.Millisecond), s.cfg.Rules.RetryWindow)
		s.emit(o, &a)
		s.emitDenial(o)
		s.emitEvent(o, event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "approval-retry", Title: "A denied action was attempted again",
			Severity: "high", Surface: event.SurfaceApproval, Output: fmt.Sprintf("%s %s asked again after its deny (rule %s): denied at once", o.action, o.object, r.Name)}})
		if o.action == policy.ApproveExec {
			_ = s.cfg.Exec.Revoke(o.n.PID)
			s.mu.Lock()
			s.searchAfterDeny(o.n.PID, o.exec, "", Repeated, time.Now())
			s.mu.Unlock()
		}
		s.reply(o, 0, unix.EPERM)
		return
	case covered:
		v, e := o.perform()
		a := base
		a.Outcome, a.Channel, a.Result = "covered", ChannelBroker, result(v, e)
		a.Reason = fmt.Sprintf("within the count of %d of an earlier approval", r.Count)
		s.emit(o, &a)
		s.reply(o, v, e)
		return
	}
	req := &Request{CallID: s.cfg.Call.CallID, Tenant: s.cfg.Call.Tenant, Tool: s.cfg.Call.Tool, Action: o.action,
		Syscall: o.name, Object: s.redact(o, o.object), Rule: r.Name, Approvers: r.Approvers, PID: o.n.PID, lookup: o.object,
		inode: o.inode, inodeKnown: o.inodeKnown}
	req.OnRefused = func(d Decision, claimed string) {
		a := base
		a.ID, a.Outcome, a.By, a.Channel, a.Reason, a.LatencyNs = req.ID, d.Outcome, d.By, d.Channel, d.Reason, int64(d.Latency)
		a.Claimed = claimed
		s.emit(o, &a)
	}
	abandon := make(chan struct{})
	stopWatch := make(chan struct{})
	go s.watch(o.n.ID, abandon, stopWatch)
	d := s.cfg.Broker.AskWith(req, s.cfg.Rules.Timeout, abandon, func(r *Request) {
		a := base
		a.Outcome, a.ID = "requested", r.ID
		s.emit(o, &a)
	})
	close(stopWatch)
	a := base
	a.ID, a.Outcome, a.By, a.Channel, a.Reason, a.LatencyNs = req.ID, d.Outcome, d.By, d.Channel, d.Reason, int64(d.Latency)
	if d.Outcome == Ended {
		s.mu.Lock()
		if s.reason != "" {
			a.Reason = "the call ended while the request waited: " + s.reason
		}
		s.mu.Unlock()
	}
	if d.Allowed() && idValid(s.fd, o.n.ID) {
		v, e := o.perform()
		a.Result = result(v, e)
		s.mu.Lock()
		s.covered[r.Name] = r.Count - 1
		s.mu.Unlock()
		s.emit(o, &a)
		s.reply(o, v, e)
		return
	}
	if d.Allowed() {
		a.Outcome, a.Reason = Ended, "approved after the syscall's thread was gone: nothing done"
	}
	a.Result = -int64(unix.EPERM)
	if d.Outcome == Denied || d.Outcome == Timeout {
		s.mu.Lock()
		s.denied[key] = time.Now()
		if o.action == policy.ApproveExec {
			s.searchAfterDeny(o.n.PID, o.exec, req.ID, d.Outcome, time.Now())
		}
		s.mu.Unlock()
	}
	if o.action == policy.ApproveExec {
		_ = s.cfg.Exec.Revoke(o.n.PID)
	}
	s.emit(o, &a)
	s.emitDenial(o)
	s.reply(o, 0, unix.EPERM)
}

// watch abandons a request whose syscall is no longer held: its thread was killed (a cap
// ended the call) or the call ended.
func (s *Supervisor) watch(id uint64, abandon chan<- struct{}, stop <-chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.ended:
			close(abandon)
			return
		case <-t.C:
			if !idValid(s.fd, id) {
				close(abandon)
				return
			}
		}
	}
}

func result(v int64, e unix.Errno) int64 {
	if e != 0 {
		return -int64(e)
	}
	if v == fdInstalled || v == execContinue {
		return 0
	}
	return v
}

func (s *Supervisor) emit(o *op, a *event.Approval) {
	s.emitEvent(o, event.Event{Kind: event.KindApproval, Approval: a})
}

func (s *Supervisor) emitDenial(o *op) {
	s.emitEvent(o, event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: event.LayerApproval, Surface: event.SurfaceApproval,
		Rule: "spec.approvals " + o.rule.Name, Object: o.object}})
}

func (s *Supervisor) emitEvent(o *op, ev event.Event) {
	ev.TID, ev.PID = o.n.PID, uint32(o.tgid)
	// What quotes the tool's object passes the policy's patterns (redact.go).
	switch {
	case ev.Approval != nil:
		ev.Approval.Object = s.redact(o, ev.Approval.Object)
	case ev.Denial != nil:
		ev.Denial.Object = s.redact(o, ev.Denial.Object)
	case ev.Alert != nil && ev.Alert.RuleID != redactAlert:
		ev.Alert.Output = s.redact(o, ev.Alert.Output)
	}
	s.cfg.Emit(ev)
}
