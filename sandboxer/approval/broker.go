// Package approval holds irreversible actions of a tool call until a person decides: the
// supervisor (supervise.go) takes the call's gated syscalls from a seccomp user notification,
// the Broker asks (the local API, a webhook, a terminal prompt) and waits for an answer or the
// timeout, and the supervisor performs what was approved itself on the arguments it read and
// validated, never letting the kernel re-read the tool's memory.
package approval

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/secrets"
)

// Outcomes of a request.
const (
	Approved = "approved"
	Denied   = "denied"
	Timeout  = "timeout" // nobody answered in time: a deny
	Ended    = "ended"   // the call ended (a cap, an interruption) while the request waited
	Repeated = "repeat"  // the call asked again for an action just denied: denied at once
	// Refused is a decision by someone the rule does not name as an approver: recorded, not
	// taken (the request keeps waiting).
	Refused = "refused"
)

// Channels a decision came through.
const (
	ChannelAPI    = "api"    // the local HTTP API, or bermd's control socket (berm approve/deny use them)
	ChannelPrompt = "prompt" // the terminal prompt of an embedded `berm run`
	ChannelBroker = "broker" // no person: the timeout, the call's end, a repeat
)

// Request is one pending action, as a person is asked about it.
type Request struct {
	ID      string `json:"id"`
	CallID  string `json:"call"`
	Tenant  string `json:"tenant"`
	Tool    string `json:"tool"`
	Action  string `json:"action"`  // policy.Approve*: unlink, rename, write, exec, connect
	Syscall string `json:"syscall"` // the syscall held
	Object  string `json:"object"`  // the path (old -> new for a rename), or address:port
	// Inode is the object's file as the broker found it when the request was published
	// ("MAJOR:MINOR INODE", from the kernel through the tool's root; empty for no file yet,
	// an address or a program): something the tool's own output cannot know to imitate
	// beside the request's random id.
	Inode     string    `json:"inode,omitempty"`
	Rule      string    `json:"rule"`
	Approvers []string  `json:"approvers,omitempty"`
	PID       uint32    `json:"pid"`
	Created   time.Time `json:"created"`
	Deadline  time.Time `json:"deadline"`

	// OnRefused, when set, records a decision attempt refused: its maker is not one of the
	// rule's approvers, or claimed a name not theirs (claimed) (the supervisor puts it in the
	// call's trail).
	OnRefused func(d Decision, claimed string) `json:"-"`

	// lookup, when set, is the object as the tool named it, for the broker's own look-up of
	// its inode: Object may be redacted (the policy's patterns), lookup never leaves berm.
	lookup string
	// inode, when inodeKnown, is Inode as the supervisor took it from the directory it
	// resolved (no second walk of the object's path, which could lead somewhere else since,
	// into a file system that never answers).
	inode      string
	inodeKnown bool

	done chan Decision
}

// Age is how long the request has waited.
func (r *Request) Age(now time.Time) time.Duration { return now.Sub(r.Created) }

// Decision is the answer to a request.
type Decision struct {
	Outcome string        `json:"outcome"`
	By      string        `json:"by,omitempty"`
	Channel string        `json:"channel"`
	Reason  string        `json:"reason,omitempty"`
	Latency time.Duration `json:"latency"`
}

// Allowed says whether the action may happen.
func (d Decision) Allowed() bool { return d.Outcome == Approved }

// Broker is the node's pending requests, for every call of this process (bermd's calls, or
// the embedded agent's one). It is safe for concurrent use.
type Broker struct {
	log     *slog.Logger
	metrics *metrics
	hook    *Webhook
	prompt  Prompter
	// approvers say who may decide a rule naming approvers (nil: the names root gives).
	approvers *Approvers
	// decideAccess, when set, decides whether the API's peer (uid) may decide tenant's calls.
	decideAccess func(uid int, tenant string) error
	secrets      Scrubber

	mu      sync.Mutex
	pending map[string]*Request
}

// Config configures a Broker.
type Config struct {
	Log      *slog.Logger
	Registry prometheus.Registerer // the process's dedicated registry; nil: no metrics
	Webhook  *Webhook              // nil: none
	// Prompt asks a person at a terminal (the embedded default with a tty); nil: none.
	Prompt Prompter
	// Approvers are who may decide (approvers.go); nil: rules' approvers are checked against
	// the names given by root (the admin token, the terminal of a run).
	Approvers *Approvers
	// DecideAccess, when set, is asked before a decision over the API by anyone but the admin
	// token: may the peer (its uid from the socket, -1 when unknown) decide the calls of the
	// tenant (bermd --access: the decide right)? An error refuses the decision.
	DecideAccess func(uid int, tenant string) error
	// Secrets are the node's live brokered secrets (*secrets.Registry): every field of a
	// request passes them before it leaves berm, and a request whose object holds one is
	// denied at once, asking nobody. Nil: none.
	Secrets Scrubber
}

// Scrubber takes live secrets out of a string, saying which it found (*secrets.Registry).
type Scrubber interface {
	Scrub(s string) (string, []secrets.Hit)
}

// Prompter asks a person about a request and returns their answer (and who gave it), or
// false when the question could not be put or was abandoned (decided elsewhere, or the call
// ended).
type Prompter interface {
	Ask(r *Request, abandon <-chan struct{}) (approve bool, by, reason string, ok bool)
}

// New makes a Broker.
func New(cfg Config) (*Broker, error) {
	b := &Broker{log: cfg.Log, hook: cfg.Webhook, prompt: cfg.Prompt, approvers: cfg.Approvers, decideAccess: cfg.DecideAccess, secrets: cfg.Secrets, pending: map[string]*Request{}}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registry, b.count)
	if err != nil {
		return nil, err
	}
	b.metrics = m
	return b, nil
}

// Close abandons nothing: a pending request ends with its call (or its timeout).
func (b *Broker) Close() error { return nil }

func (b *Broker) count() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(len(b.pending))
}

func newID() string {
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

// Ask holds r until a decision, the timeout (a deny), or abandon closing (the call ended).
// The returned Decision is final.
func (b *Broker) Ask(r *Request, timeout time.Duration, abandon <-chan struct{}) Decision {
	return b.AskWith(r, timeout, abandon, nil)
}

// AskWith is Ask with registered called once r has its id, before anyone is asked (the
// request's event goes into the trail before its decision can).
func (b *Broker) AskWith(r *Request, timeout time.Duration, abandon <-chan struct{}, registered func(*Request)) Decision {
	r.ID = newID()
	r.Created = time.Now()
	r.Deadline = r.Created.Add(timeout)
	r.done = make(chan Decision, 1)
	// What leaves berm from here (the log, the webhook, the API, the prompt, the trail) is
	// the request with every live secret redacted and every field escaped.
	leaks := b.redact(r)
	if len(leaks) == 0 && r.inodeKnown {
		r.Inode = r.inode
	} else if len(leaks) == 0 {
		// On a goroutine of its own: the supervisor calls this from a thread confined as the
		// tool (its root, ids and Landlock domain), which could not look at the tool's root.
		ino := make(chan string, 1)
		object := r.Object
		if r.lookup != "" {
			object = r.lookup
		}
		go func(pid uint32, action, object string) { ino <- objectInode(pid, action, object) }(r.PID, r.Action, object)
		r.Inode = <-ino
	}
	r.escaped()
	if registered != nil {
		registered(r)
	}
	b.metrics.requests.Inc()
	if len(leaks) > 0 {
		// The tool named a live credential in what a person would be asked about: asking
		// would carry it out (a webhook, a chat, a terminal). Denied without asking; the
		// trail's credential events and alert come from the redaction of the request's events.
		d := Decision{Outcome: Denied, Channel: ChannelBroker, Latency: time.Since(r.Created),
			Reason: fmt.Sprintf("its object holds the live credential %s: denied without asking anyone (the request would carry it out)", strings.Join(leaks, ", "))}
		b.metrics.observe(d)
		b.log.Warn("approval denied: its object holds a live credential", "id", r.ID, "call", r.CallID, "tenant", r.Tenant, "action", r.Action,
			"object", r.Object, "credentials", strings.Join(leaks, ", "), "rule", r.Rule)
		return d
	}
	b.mu.Lock()
	b.pending[r.ID] = r
	b.mu.Unlock()
	b.log.Info("approval requested", "id", r.ID, "call", r.CallID, "tenant", r.Tenant, "action", r.Action, "object", r.Object, "rule", r.Rule)
	if b.hook != nil {
		b.hook.Send(*r)
	}
	stopPrompt := make(chan struct{})
	defer close(stopPrompt)
	if b.prompt != nil {
		go func() {
			gone := make(chan struct{})
			go func() {
				select {
				case <-stopPrompt:
				case <-abandon:
				}
				close(gone)
			}()
			if ok, by, reason, asked := b.prompt.Ask(r, gone); asked {
				_ = b.Decide(r.ID, ok, by, ChannelPrompt, reason)
			}
		}()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var d Decision
	select {
	case d = <-r.done:
	case <-timer.C:
		d = b.settle(r, Decision{Outcome: Timeout, Channel: ChannelBroker, Reason: fmt.Sprintf("no answer in %s", timeout)})
	case <-abandon:
		d = b.settle(r, Decision{Outcome: Ended, Channel: ChannelBroker, Reason: "the call ended while the request waited"})
	}
	return d
}

// settle ends r with d unless a decision got there first (which then stands).
func (b *Broker) settle(r *Request, d Decision) Decision {
	if err := b.decide(r.ID, d); err != nil {
		return <-r.done
	}
	return <-r.done
}

// ErrUnknown is a decision about no pending request (decided already, or never asked).
var ErrUnknown = errors.New("no pending approval with this id")

// Decide answers a pending request: approve or deny, by whom (an identity the channel
// established), with a reason. A decider the request's rule does not name is refused with
// ErrNotApprover, recorded, and the request keeps waiting.
func (b *Broker) Decide(id string, approve bool, by, channel, reason string) error {
	outcome := Denied
	if approve {
		outcome = Approved
	}
	b.mu.Lock()
	r, ok := b.pending[id]
	b.mu.Unlock()
	if !ok {
		return ErrUnknown
	}
	if !b.approvers.May(by, r.Approvers) {
		err := fmt.Errorf("approval %s: %s may not decide it: rule %s names approvers %s: %w", id, by, r.Rule, strings.Join(r.Approvers, ", "), ErrNotApprover)
		b.refused(r, RefusedNotApprover, Decision{Outcome: Refused, By: by, Channel: channel,
			Reason: fmt.Sprintf("would have %s (%s); %s may not decide rule %s", outcome, reason, by, r.Rule)}, "")
		return err
	}
	return b.decide(id, Decision{Outcome: outcome, By: by, Channel: channel, Reason: reason})
}

// Why a decision attempt was refused (the berm_approval_refused_decisions_total reason).
const (
	RefusedNotApprover     = "not-approver"    // an identity the request's rule does not name
	RefusedImpersonation   = "impersonation"   // a token or unix user claiming another's name
	RefusedUnauthenticated = "unauthenticated" // no token and no approver's unix user: nobody to record
)

// Refuse records a decision attempt on request id refused because its maker claimed a name
// that is not theirs: who is who the token or socket peer is, claimed the name they gave. An
// id that names no pending request is only counted (there is no call's trail to put it in).
func (b *Broker) Refuse(id string, approve bool, who, claimed, channel, reason string) {
	outcome := Denied
	if approve {
		outcome = Approved
	}
	b.mu.Lock()
	r := b.pending[id]
	b.mu.Unlock()
	d := Decision{Outcome: Refused, By: who, Channel: channel,
		Reason: fmt.Sprintf("would have %s (%s); %s claimed to be %s: only root names who decides", outcome, reason, who, claimed)}
	b.refused(r, RefusedImpersonation, d, claimed)
}

// Unauthenticated counts a decision attempt with no identity: not recorded in any call's
// trail (anyone who can reach the socket could fill trails with it), only counted.
func (b *Broker) Unauthenticated(channel string) {
	b.metrics.refused.WithLabelValues(channel, RefusedUnauthenticated).Inc()
}

// refused records a refused decision attempt about r (nil: no pending request) in its
// call's trail and counts it.
func (b *Broker) refused(r *Request, why string, d Decision, claimed string) {
	b.metrics.refused.WithLabelValues(d.Channel, why).Inc()
	if r == nil {
		b.log.Warn("approval decision refused", "by", d.By, "claimed", claimed, "channel", d.Channel, "why", why)
		return
	}
	d.Latency = time.Since(r.Created)
	b.log.Warn("approval decision refused", "id", r.ID, "call", r.CallID, "by", d.By, "claimed", claimed, "channel", d.Channel, "why", why, "rule", r.Rule)
	if r.OnRefused != nil {
		r.OnRefused(d, claimed)
	}
}

func (b *Broker) decide(id string, d Decision) error {
	b.mu.Lock()
	r, ok := b.pending[id]
	if ok {
		delete(b.pending, id)
	}
	b.mu.Unlock()
	if !ok {
		return ErrUnknown
	}
	d.Latency = time.Since(r.Created)
	b.metrics.observe(d)
	b.log.Info("approval decided", "id", id, "call", r.CallID, "outcome", d.Outcome, "by", d.By, "channel", d.Channel, "latency", d.Latency)
	r.done <- d
	return nil
}

// Repeat records an immediate deny that never waited (a repeat of a denied action).
func (b *Broker) Repeat() {
	b.metrics.observe(Decision{Outcome: Repeated, Channel: ChannelBroker})
}

// tenantOf is the tenant of a pending request ("" and false when none is pending).
func (b *Broker) tenantOf(id string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.pending[id]
	if !ok {
		return "", false
	}
	return r.Tenant, true
}

// TenantOf is the tenant of a pending request ("" and false when none is pending): bermd
// decides a caller's right to answer it from the request itself, never from the caller's word.
func (b *Broker) TenantOf(id string) (string, bool) { return b.tenantOf(id) }

// Decider is who a unix user deciding over bermd's control socket (its uid from the kernel)
// is recorded as: the approvers file's person with that uid, else "user:NAME" (or "uid:N"),
// which is never a person's name (a rule naming approvers refuses it).
func (b *Broker) Decider(uid int) string {
	if who, ok := b.approvers.byUID(uid); ok {
		return who
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return "user:" + u.Username
	}
	return "uid:" + strconv.Itoa(uid)
}

// List returns the pending requests, oldest first.
func (b *Broker) List() []Request {
	b.mu.Lock()
	out := make([]Request, 0, len(b.pending))
	for _, r := range b.pending {
		c := *r
		c.done, c.lookup = nil, ""
		out = append(out, c)
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b Request) int { return a.Created.Compare(b.Created) })
	return out
}
