package rules

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
)

// maxKeysPerCall bounds the window state one call can create (a window keyed by a value the
// tool controls must not grow without end).
const maxKeysPerCall = 4096

// Engine evaluates a rule set on a stream of events and returns the alerts they raise.
type Engine struct {
	set atomic.Pointer[Set]
	m   *metrics

	mu    sync.Mutex // guards act and calls; Eval is called from one goroutine, so it is free
	act   activation
	calls map[string]*callState

	reloadMu  sync.Mutex
	reloadErr error
}

type callState struct {
	windows map[winKey]*window
	marks   map[winKey]time.Time // sequence rules: when their earlier event was last seen, by key
}

// Window state is keyed by the compiled rule: a swap starts windows afresh.
type winKey struct {
	rule *Rule
	by   string
}

// window holds the times of the last Count matches, in a ring.
type window struct {
	times []time.Time
	next  int
	n     int
	quiet time.Time // after firing, matches before this do not count: one alert per window
	// seen: when each value of the rule's distinct expression last counted (distinct windows)
	seen map[string]time.Time
}

// NewEngine makes an engine over set. reg may be nil.
func NewEngine(set *Set, reg prometheus.Registerer) *Engine {
	e := &Engine{m: newMetrics(reg), calls: map[string]*callState{}}
	e.Swap(set)
	return e
}

// Set is the active rule set.
func (e *Engine) Set() *Set { return e.set.Load() }

// Swap replaces the rule set; evaluations in flight finish with the old one.
func (e *Engine) Swap(set *Set) {
	e.set.Store(set)
	e.mu.Lock()
	for _, cs := range e.calls {
		clear(cs.windows)
		clear(cs.marks)
	}
	e.mu.Unlock()
	if set != nil {
		e.m.rules.Set(float64(set.Len()))
	}
}

// EndCall drops the state kept for a call (by event.Event.Key: its call key).
func (e *Engine) EndCall(callKey string) {
	e.mu.Lock()
	delete(e.calls, callKey)
	e.mu.Unlock()
}

// ReloadError is the error of the last failed reload, nil after a good one.
func (e *Engine) ReloadError() error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	return e.reloadErr
}

func (e *Engine) setReloadResult(err error) {
	e.reloadMu.Lock()
	e.reloadErr = err
	e.reloadMu.Unlock()
	if err != nil {
		e.m.reloads.WithLabelValues("error").Inc()
	} else {
		e.m.reloads.WithLabelValues("ok").Inc()
	}
}

// Eval evaluates the rules that can match ev and returns the alerts it raises: events of kind
// alert for the same call and process, with Alert.EventSeq = ev.Seq and Seq left 0.
func (e *Engine) Eval(ev *event.Event) []event.Event {
	if ev.Kind == event.KindAlert {
		return nil
	}
	s := e.set.Load()
	if s == nil {
		return nil
	}
	b := s.candidates(ev)
	if b == nil || len(b.rules) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.act.ev = ev
	var out []event.Event
	if b.all != nil {
		if v, _, err := b.all.Eval(&e.act); err == nil {
			if l, ok := v.(traits.Lister); ok && int(l.Size().(types.Int)) == len(b.rules) {
				for i, r := range b.rules {
					if l.Get(types.Int(i)) == types.True {
						out = e.matched(r, ev, out)
					}
				}
				e.act.ev = nil
				return out
			}
		}
		// A condition failed: evaluate one by one to tell which, and count its error.
	}
	for _, r := range b.rules {
		ok, _, err := r.cond.Eval(&e.act)
		if err != nil {
			e.m.errors.WithLabelValues(r.ID).Inc()
			continue
		}
		if ok == types.True {
			out = e.matched(r, ev, out)
		}
	}
	e.act.ev = nil
	return out
}

// matched takes a rule whose condition holds through its exceptions and window.
func (e *Engine) matched(r *Rule, ev *event.Event, out []event.Event) []event.Event {
	if r.Sequence != nil && !e.sequence(r, ev) {
		return out
	}
	for _, ex := range r.exceptions {
		if v, _, err := ex.prg.Eval(&e.act); err == nil && v == types.True {
			return out
		}
	}
	if r.Window != nil && !e.window(r, ev) {
		return out
	}
	e.m.alerts.WithLabelValues(r.ID, r.Severity, r.Surface).Inc()
	return append(out, r.alert(ev, &e.act))
}

// sequence handles an event on which a sequence rule's (after) || (condition) holds: it says
// whether the event completes the sequence (matches the condition, after a remembered event
// with the same key), then remembers it if it matches after. The trigger is looked at first so
// that one event cannot be both steps.
func (e *Engine) sequence(r *Rule, ev *event.Event) bool {
	cs := e.state(ev)
	fire := false
	if v, _, err := r.trigger.Eval(&e.act); err == nil && v == types.True {
		if k, ok := e.keyOf(r.key); ok {
			if t, seen := cs.marks[winKey{rule: r, by: k}]; seen && !ev.Time.Before(t) && ev.Time.Sub(t) <= r.Sequence.Within {
				fire = true
			}
		}
	}
	if v, _, err := r.first.Eval(&e.act); err == nil && v == types.True {
		if k, ok := e.keyOf(r.firstKey); ok {
			key := winKey{rule: r, by: k}
			if _, seen := cs.marks[key]; seen || len(cs.marks) < maxKeysPerCall {
				cs.marks[key] = ev.Time
			}
		}
	}
	return fire
}

// keyOf evaluates a sequence key ("" when the rule has none).
func (e *Engine) keyOf(p cel.Program) (string, bool) {
	if p == nil {
		return "", true
	}
	v, _, err := p.Eval(&e.act)
	if err != nil {
		return "", false
	}
	return format(v), true
}

func (e *Engine) state(ev *event.Event) *callState {
	cs := e.calls[ev.Key()]
	if cs == nil {
		cs = &callState{windows: map[winKey]*window{}, marks: map[winKey]time.Time{}}
		e.calls[ev.Key()] = cs
	}
	return cs
}

// window counts a match of a windowed rule and says whether the rule fires.
func (e *Engine) window(r *Rule, ev *event.Event) bool {
	cs := e.state(ev)
	key := winKey{rule: r}
	if r.by != nil {
		v, _, err := r.by.Eval(&e.act)
		if err != nil {
			return false
		}
		key.by = format(v)
	}
	w := cs.windows[key]
	if w == nil {
		if len(cs.windows) >= maxKeysPerCall {
			return false
		}
		w = &window{times: make([]time.Time, r.Window.Count)}
		cs.windows[key] = w
	}
	t := ev.Time
	if t.Before(w.quiet) {
		return false
	}
	if r.distinct != nil && !w.fresh(r, &e.act, t) {
		return false
	}
	w.times[w.next] = t
	w.next = (w.next + 1) % len(w.times)
	if w.n < len(w.times) {
		w.n++
	}
	if w.n < len(w.times) {
		return false
	}
	oldest := w.times[w.next] // the ring is full: next is the oldest
	if t.Sub(oldest) > r.Window.Within {
		return false
	}
	w.n, w.next = 0, 0
	w.quiet = t.Add(r.Window.Within)
	return true
}

// fresh says whether the match's distinct value is new in the window, and notes it. The values
// kept are bounded: those older than the window go first, and past maxKeysPerCall a value
// counts as seen (the tool controls them).
func (w *window) fresh(r *Rule, act *activation, t time.Time) bool {
	v, _, err := r.distinct.Eval(act)
	if err != nil {
		return false
	}
	key := format(v)
	if w.seen == nil {
		w.seen = map[string]time.Time{}
	}
	if last, ok := w.seen[key]; ok && t.Sub(last) <= r.Window.Within {
		return false
	}
	if len(w.seen) >= maxKeysPerCall {
		for k, last := range w.seen {
			if t.Sub(last) > r.Window.Within {
				delete(w.seen, k)
			}
		}
		if len(w.seen) >= maxKeysPerCall {
			return false
		}
	}
	w.seen[key] = t
	return true
}

func (r *Rule) alert(ev *event.Event, act *activation) event.Event {
	return event.Event{
		CallID: ev.CallID, CallKey: ev.CallKey, Time: ev.Time, Kind: event.KindAlert, Tool: ev.Tool, Tenant: ev.Tenant,
		PID: ev.PID, TID: ev.TID, PPID: ev.PPID, UID: ev.UID, Comm: ev.Comm, Exe: ev.Exe, ParentExe: ev.ParentExe,
		Alert: &event.Alert{
			RuleID: r.ID, Title: r.Title, Severity: r.Severity, Surface: r.Surface,
			Technique: r.Technique, Output: r.render(act), EventSeq: ev.Seq,
		},
	}
}

// render prints the output template; an expression that fails prints as <error: ...>.
func (r *Rule) render(act *activation) string {
	s, _ := r.renderErr(act)
	return s
}

func (r *Rule) renderErr(act *activation) (string, error) {
	var b strings.Builder
	var errs []error
	for _, p := range r.output {
		if p.prg == nil {
			b.WriteString(p.lit)
			continue
		}
		v, _, err := p.prg.Eval(act)
		if err != nil {
			fmt.Fprintf(&b, "<error: %v>", err)
			errs = append(errs, err)
			continue
		}
		b.WriteString(format(v))
	}
	return b.String(), errors.Join(errs...)
}

// format prints a CEL value for an output: strings bare, lists space-separated.
func format(v ref.Val) string {
	switch x := v.(type) {
	case types.String:
		return string(x)
	case traits.Lister:
		n := int64(x.Size().(types.Int))
		items := make([]string, 0, n)
		for i := int64(0); i < n; i++ {
			items = append(items, format(x.Get(types.Int(i))))
		}
		return strings.Join(items, " ")
	}
	return fmt.Sprint(v.Value())
}

type metrics struct {
	alerts  *prometheus.CounterVec
	errors  *prometheus.CounterVec
	reloads *prometheus.CounterVec
	rules   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_alerts_total", Help: "Alerts raised by detection rules.",
		}, []string{"rule", "severity", "surface"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_rule_errors_total", Help: "Rule evaluations that failed (counted as no match).",
		}, []string{"rule"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_rules_reloads_total", Help: "Rule set reloads, by result.",
		}, []string{"result"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_rules_active", Help: "Enabled rules in the active rule set.",
		}),
	}
	if reg == nil {
		return m
	}
	m.alerts = register(reg, m.alerts)
	m.errors = register(reg, m.errors)
	m.reloads = register(reg, m.reloads)
	m.rules = register(reg, m.rules)
	return m
}

// register registers c, or reuses the collector already registered under its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if prev, ok := are.ExistingCollector.(C); ok {
				return prev
			}
		}
	}
	return c
}
