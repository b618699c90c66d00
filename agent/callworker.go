package agent

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bermsec/berm/agent/event"
)

// inboxBatches bounds a call's queue between the ring reader and its worker: past it, the
// call's own events are dropped and counted against it, and no other call waits. The reader
// never waits for a worker, so this queue is what absorbs a call's bursts (the ring no longer
// does): up to 1024 batches of at most batchRecords records, ~30 MiB of small records for a
// call whose worker lags, none for the others.
const inboxBatches = 1024

// The bytes of raw records waiting in queues are bounded too, per call and for the node: a
// call flooding with large records (4 KiB paths, 8 KiB argv) would otherwise hold up to a
// thousand batches of them in bermd's memory. Past either bound, the call's records are
// dropped and counted against it.
const (
	inboxBytes = 32 << 20
	nodeBytes  = 256 << 20
)

// worker is a call's own stage of the pipeline. The reader only sorts records by call (cheap,
// the same for every record); decoding, judging, rules and the journal run here, per call, so
// a call whose events are many or slow to judge delays itself and nobody else.
type worker struct {
	in   chan *batch
	quit chan struct{}
	done chan struct{}

	routed uint64        // under Agent.mu: events handed to in
	queued atomic.Int64  // bytes of raw records in in
	taken  atomic.Uint64 // events the worker has finished with
	// progress: events the worker has handled one by one (End's drain waits while it grows)
	progress atomic.Uint64
	ended    bool // under Agent.mu: End took the call out; nothing more is routed

	// abandoned: End gave up waiting; the worker stops at the event at hand and counts the
	// rest as lost.
	abandoned atomic.Bool
	late      uint64 // worker goroutine: events it received and did not process

	waitMu sync.Mutex
	waits  []waiter

	// state is held by the worker while it handles one event, and by End once the worker
	// stopped: the call's counts, sequence and pending events are read under it.
	state sync.Mutex
}

type waiter struct {
	n    uint64
	done chan struct{}
}

// barrierReq asks for a signal once the call's worker has finished with every event the
// reader routed to it up to the barrier.
type barrierReq struct {
	c    *Call
	done chan struct{}
}

func (w *worker) init() {
	w.in = make(chan *batch, inboxBatches)
	w.quit = make(chan struct{})
	w.done = make(chan struct{})
}

// work runs the call's stage until End stops it.
func (a *Agent) work(c *Call) {
	defer close(c.worker.done)
	for {
		select {
		case b := <-c.in:
			c.queued.Add(-int64(len(b.buf)))
			a.queued.Add(-int64(len(b.buf)))
			evs := a.decodeBatch(c, b)
			for i := range evs {
				c.state.Lock()
				if c.abandoned.Load() {
					c.late += uint64(len(evs) - i)
					c.state.Unlock()
					break
				}
				c.enrich(&evs[i])
				a.append(c, evs[i])
				c.state.Unlock()
				c.progress.Add(1)
			}
			if len(c.in) == 0 {
				c.state.Lock()
				if err := a.flush(c); err != nil {
					a.log.Error("journal append failed", "call_id", c.Start.CallID, "err", err)
				}
				c.state.Unlock()
			}
			c.taken.Add(b.len())
			c.release()
		case <-c.quit:
			return
		}
	}
}

// route hands a call its events; it never blocks. Noise takes the queue up to its share
// (vital.go); past it, only the batch's vital records are queued; past the whole queue,
// nothing is. What is left out is dropped, counted against the call.
func (a *Agent) route(c *Call, b *batch) {
	n := b.len()
	a.mu.Lock()
	defer a.mu.Unlock()
	if c.ended {
		a.m.orphans.Add(float64(n))
		return
	}
	var dropped uint64
	size := int64(len(b.buf))
	if len(c.in) >= noiseBatches || c.queued.Load()+size > noiseBytes || a.queued.Load()+size > nodeNoise {
		b, dropped = vitalOnly(b)
		n, size = b.len(), int64(len(b.buf))
		a.userNoise[c.slot].Add(dropped)
	}
	if n > 0 && c.queued.Load()+size <= inboxBytes && a.queued.Load()+size <= nodeBytes {
		select {
		case c.in <- b:
			c.queued.Add(size)
			a.queued.Add(size)
			c.routed += n
			n = 0
		default:
		}
	}
	if dropped += n; dropped > 0 {
		a.userDrops[c.slot].Add(dropped)
		a.m.drops.WithLabelValues("user").Add(float64(dropped))
	}
}

// arm registers a barrier at what has been routed to the call so far (reader goroutine, after
// it routed what the ring held at the flush).
func (a *Agent) arm(r barrierReq) {
	a.mu.Lock()
	n := r.c.routed
	a.mu.Unlock()
	r.c.waitMu.Lock()
	r.c.waits = append(r.c.waits, waiter{n: n, done: r.done})
	r.c.waitMu.Unlock()
	r.c.release()
}

// release signals the barriers the worker has reached.
func (w *worker) release() {
	taken := w.taken.Load()
	w.waitMu.Lock()
	defer w.waitMu.Unlock()
	keep := w.waits[:0]
	for _, wt := range w.waits {
		if wt.n <= taken {
			close(wt.done)
		} else {
			keep = append(keep, wt)
		}
	}
	w.waits = keep
}

// stop ends the worker and returns, with the call's state held, how many of the call's
// events it never processed (and the bytes of the records among them still queued). The
// caller has set ended, so nothing more arrives. A worker still inside one event after wait
// (a rule or the judge that does not return) is left to it: stuck, and the state is not the
// caller's to read.
func (w *worker) stop(wait time.Duration) (late uint64, lostBytes int64, stuck bool) {
	close(w.quit)
	deadline := time.Now().Add(wait)
	select {
	case <-w.done:
		w.state.Lock()
	case <-time.After(wait):
		for !w.state.TryLock() {
			if time.Now().After(deadline.Add(wait)) {
				return 0, 0, true
			}
			time.Sleep(time.Millisecond)
		}
	}
	late = w.late
	for {
		select {
		case b := <-w.in:
			late += b.len()
			w.queued.Add(-int64(len(b.buf)))
			lostBytes += int64(len(b.buf))
		default:
			return late, lostBytes, false
		}
	}
}

// maxAggregateKeys bounds the (kind, object) pairs a call aggregates: past it, objects are
// counted as "(other)", so a tool cannot make the aggregate itself grow without end.
const maxAggregateKeys = 4096

type aggKey struct {
	kind   event.Kind
	object string
}

// aggregator takes a call's high-volume events past its budget.
type aggregator struct {
	budget uint64
	kept   uint64 // events recorded one by one
	total  uint64 // events aggregated
	m      map[aggKey]*event.Aggregate
}

// take says whether ev is aggregated instead of recorded, and in which aggregate.
func (g *aggregator) take(ev *event.Event) (bool, *event.Aggregate) {
	switch ev.Kind {
	case event.KindOpen, event.KindSyscall, event.KindConnect, event.KindFork, event.KindExit, event.KindDenial:
	default:
		return false, nil // execs, alerts, limits, drops and aggregates are always recorded
	}
	if g.kept < g.budget {
		g.kept++
		return false, nil
	}
	k := aggKey{ev.Kind, aggObject(ev)}
	if g.m == nil {
		g.m = map[aggKey]*event.Aggregate{}
	}
	ag := g.m[k]
	if ag == nil {
		if len(g.m) >= maxAggregateKeys {
			k.object = "(other)"
			ag = g.m[k]
		}
		if ag == nil {
			ag = &event.Aggregate{Kind: k.kind, Object: k.object, First: ev.Seq}
			g.m[k] = ag
		}
	}
	ag.Count++
	ag.Last = ev.Seq
	if failed(ev) {
		ag.Failed++
	}
	g.total++
	return true, ag
}

// addKernel adds what the kernel counted of a syscall instead of reporting it: the syscall's
// aggregate was started by the events that made the agent ask for it.
func (g *aggregator) addKernel(name string, n, failed uint64) {
	k := aggKey{event.KindSyscall, name}
	if g.m == nil {
		g.m = map[aggKey]*event.Aggregate{}
	}
	ag := g.m[k]
	if ag == nil {
		ag = &event.Aggregate{Kind: k.kind, Object: k.object}
		g.m[k] = ag
	}
	ag.Count += n
	ag.Failed += failed
	g.total += n
}

// events are the aggregates as events, in the order of their first event.
func (g *aggregator) events(at time.Time) []event.Event {
	out := make([]event.Event, 0, len(g.m))
	for _, ag := range g.m {
		out = append(out, event.Event{Time: at, Kind: event.KindAggregate, Aggregate: ag})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Aggregate.First < out[j].Aggregate.First })
	return out
}

func aggObject(ev *event.Event) string {
	switch {
	case ev.Open != nil:
		return ev.Open.Path
	case ev.Syscall != nil:
		if ev.Syscall.Path != "" {
			return ev.Syscall.Name + " " + ev.Syscall.Path
		}
		return ev.Syscall.Name
	case ev.Connect != nil:
		return fmt.Sprintf("%s %s:%d", ev.Connect.Family, ev.Connect.Addr, ev.Connect.Port)
	case ev.Denial != nil:
		return ev.Denial.Layer + " " + ev.Denial.Object
	}
	return ""
}

func failed(ev *event.Event) bool {
	switch {
	case ev.Open != nil:
		return ev.Open.Result < 0
	case ev.Syscall != nil:
		return ev.Syscall.Result < 0
	case ev.Connect != nil:
		return ev.Connect.Result < 0
	}
	return false
}
