package agent

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/agent/wire"
)

// A batch is what a call's worker receives: raw records of that call, copied out of the ring
// (its worker decodes them), or one event made in user space.
type batch struct {
	buf  []byte
	ends []int // record i is buf[ends[i-1]:ends[i]]

	user *event.Event // an event made in user space
}

// batchRecords is how many records the reader takes out of the ring before it hands what it
// read to the calls' workers.
const batchRecords = 256

func (b *batch) add(raw []byte) {
	b.buf = append(b.buf, raw...)
	b.ends = append(b.ends, len(b.buf))
}

func (b *batch) records(fn func([]byte)) {
	start := 0
	for _, end := range b.ends {
		fn(b.buf[start:end])
		start = end
	}
}

// len is how many events the batch carries.
func (b *batch) len() uint64 {
	n := uint64(len(b.ends))
	if b.user != nil {
		n++
	}
	return n
}

// router is the reader's sorting of records by call: each call's records of a round go to its
// own worker, where they are decoded, judged and journalled. Nothing after the ring is shared
// between calls, so neither a call's volume nor its slow events delay another call's events or
// its end.
type router struct {
	calls map[uint64]*routed // by cgroup id, this round
	n     int                // records read this round
}

type routed struct {
	c *Call // nil: no call has the cgroup (its records are orphans)
	b *batch
}

// readLoop copies records out of the ring and routes them to their calls. It wakes on the
// kernel's batched wake-ups or its own deadline, whichever is first.
func (a *Agent) readLoop() {
	defer a.wg.Done()
	var rec ringbuf.Record
	r := router{calls: map[uint64]*routed{}}
	var read slotSet
	for {
		a.rd.SetDeadline(time.Now().Add(a.cfg.PollInterval))
		err := a.rd.ReadInto(&rec)
		switch {
		case err == nil:
			a.sort(&r, rec.RawSample, &read)
			if r.n >= batchRecords {
				a.tellConsumed(&read)
				a.dispatch(&r)
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			a.tellConsumed(&read)
			a.dispatch(&r)
		case errors.Is(err, ringbuf.ErrFlushed):
			// Barriers registered before this point: route what the ring holds now, then arm
			// each at what its call has been handed. A call's end waits for its own worker only.
			a.barrierMu.Lock()
			waiting := a.barriers
			a.barriers = nil
			a.barrierMu.Unlock()
			a.drain(&rec, &r, &read)
			a.tellConsumed(&read)
			a.dispatch(&r)
			for _, req := range waiting {
				a.arm(req)
			}
		case errors.Is(err, ringbuf.ErrClosed):
			return
		default:
			a.log.Error("ring buffer read failed", "err", err)
			select {
			case <-a.closing:
				return
			case <-time.After(a.cfg.PollInterval):
			}
		}
	}
}

// sort puts a record in its call's batch of this round.
func (a *Agent) sort(r *router, raw []byte, read *slotSet) {
	a.took(raw, read)
	r.n++
	h, ok := wire.Header(raw)
	if !ok {
		a.m.malformed.Inc()
		a.log.Error("malformed ring buffer record", "bytes", len(raw))
		return
	}
	rt := r.calls[h.CgroupId]
	if rt == nil {
		rt = &routed{c: a.lookup(h.CgroupId)}
		if rt.c != nil {
			rt.b = &batch{}
		}
		r.calls[h.CgroupId] = rt
	}
	if rt.c == nil {
		a.m.orphans.Inc()
		return
	}
	rt.b.add(raw)
}

// dispatch hands each call its records of the round.
func (a *Agent) dispatch(r *router) {
	for cg, rt := range r.calls {
		if rt.c != nil && len(rt.b.ends) > 0 {
			a.route(rt.c, rt.b)
		}
		delete(r.calls, cg)
	}
	r.n = 0
}

// drain reads what the ring holds at this moment, and no more: a call that keeps filling the
// ring must not keep a barrier (another call's end) waiting behind its events.
func (a *Agent) drain(rec *ringbuf.Record, r *router, read *slotSet) {
	left := int64(a.rd.AvailableBytes())
	a.rd.SetDeadline(time.Now())
	for left > 0 {
		if err := a.rd.ReadInto(rec); err != nil {
			return
		}
		a.sort(r, rec.RawSample, read)
		left -= int64(len(rec.RawSample)+8+7) &^ 7 // the record's header, 8-byte aligned
	}
}

// slotSet are the slots whose ring accounting changed since the kernel was last told.
type slotSet struct {
	slots []uint32
	in    [tracer.MaxSlots]bool
}

// took counts a record read out of the ring against its slot's share, whatever becomes of
// it afterwards: it no longer takes room in the ring.
func (a *Agent) took(raw []byte, read *slotSet) {
	h, ok := wire.Header(raw)
	if !ok || h.Slot >= tracer.MaxSlots {
		return
	}
	a.consumed[h.Slot].Add(uint64(len(raw)))
	if !read.in[h.Slot] {
		read.in[h.Slot] = true
		read.slots = append(read.slots, h.Slot)
	}
}

// tellConsumed writes the read totals of the slots read from to the kernel.
func (a *Agent) tellConsumed(read *slotSet) {
	for _, s := range read.slots {
		if err := a.tr.Consumed(s, a.consumed[s].Load()); err != nil {
			a.log.Error("ring share accounting", "slot", s, "err", err)
		}
		read.in[s] = false
	}
	read.slots = read.slots[:0]
}

// decodeBatch turns a call's batch into events, on the call's own worker: what decoding costs
// is the call's. A record that does not decode is counted against the call.
func (a *Agent) decodeBatch(c *Call, b *batch) []event.Event {
	evs := make([]event.Event, 0, b.len())
	if b.user != nil {
		evs = append(evs, *b.user)
	}
	b.records(func(raw []byte) {
		if isExecEnv(raw) {
			if err := c.holdEnv(raw); err != nil {
				a.m.malformed.Inc()
				a.log.Error("malformed ring buffer record", "call_id", c.Start.CallID, "err", err)
				a.userDrops[c.slot].Add(1)
				a.m.drops.WithLabelValues("user").Inc()
			}
			return
		}
		var ev event.Event
		if err := wire.Decode(raw, &ev); err != nil {
			a.m.malformed.Inc()
			a.log.Error("malformed ring buffer record", "call_id", c.Start.CallID, "err", err)
			a.userDrops[c.slot].Add(1)
			a.m.drops.WithLabelValues("user").Inc()
			return
		}
		h, _ := wire.Header(raw)
		ev.Time = time.Unix(0, a.clock+int64(h.TsNs))
		evs = append(evs, ev)
	})
	return evs
}
