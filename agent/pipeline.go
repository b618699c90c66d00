package agent

import (
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/tracer"
)

// A batch is what travels through the queue: raw records copied out of the ring, or one event
// made in user space, or a barrier.
type batch struct {
	buf  []byte
	ends []int // record i is buf[ends[i-1]:ends[i]]

	cgroup  uint64       // with user
	user    *event.Event // an event made in user space
	barrier []barrierReq
}

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

// readLoop copies records out of the ring into batches. It wakes on the kernel's batched
// wake-ups or its own deadline, whichever is first.
func (a *Agent) readLoop() {
	defer a.wg.Done()
	defer close(a.queue)
	var rec ringbuf.Record
	b := &batch{}
	var read slotSet
	for {
		a.rd.SetDeadline(time.Now().Add(a.cfg.PollInterval))
		err := a.rd.ReadInto(&rec)
		switch {
		case err == nil:
			b.add(rec.RawSample)
			a.took(rec.RawSample, &read)
			if len(b.ends) >= batchRecords {
				a.tellConsumed(&read)
				a.send(b)
				b = &batch{}
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			a.tellConsumed(&read)
			if len(b.ends) > 0 {
				a.send(b)
				b = &batch{}
			}
		case errors.Is(err, ringbuf.ErrFlushed):
			// Barriers registered before this point: drain what the ring holds now, then
			// pass them down behind those records.
			a.barrierMu.Lock()
			waiting := a.barriers
			a.barriers = nil
			a.barrierMu.Unlock()
			a.drain(&rec, b, &read)
			a.tellConsumed(&read)
			b.barrier = waiting
			a.queue <- b
			b = &batch{}
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

// drain reads what the ring holds at this moment into b, and no more: a call that keeps
// filling the ring must not keep a barrier (another call's end) waiting behind its events.
func (a *Agent) drain(rec *ringbuf.Record, b *batch, read *slotSet) {
	left := int64(a.rd.AvailableBytes())
	a.rd.SetDeadline(time.Now())
	for left > 0 {
		if err := a.rd.ReadInto(rec); err != nil {
			return
		}
		b.add(rec.RawSample)
		a.took(rec.RawSample, read)
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
	h, ok := peekHeader(raw)
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

// send queues a batch. A full queue gets a short grace, then the batch is dropped and every
// record in it is counted against its own call.
func (a *Agent) send(b *batch) {
	select {
	case a.queue <- b:
		return
	default:
	}
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case a.queue <- b:
		return
	case <-t.C:
	}
	b.records(func(raw []byte) {
		if h, ok := peekHeader(raw); ok && h.Slot < uint32(len(a.userDrops)) {
			a.userDrops[h.Slot].Add(1)
		}
		a.m.drops.WithLabelValues("user").Inc()
	})
}

// decodeLoop decodes records and hands each to its call's worker. It does nothing whose
// cost depends on the event's content (no judging, no file system), so every call's events
// get through it at the same pace.
func (a *Agent) decodeLoop() {
	defer a.wg.Done()
	r := router{calls: map[*Call][]event.Event{}}
	for b := range a.queue {
		a.handle(b, &r)
	}
}

// router groups a batch's events by call, so each call's worker gets them in one hand-over.
type router struct {
	calls map[*Call][]event.Event
	last  *Call // the call of the previous record: consecutive records mostly share one
}

func (r *router) add(c *Call, ev event.Event) { r.calls[c] = append(r.calls[c], ev) }

func (a *Agent) handle(b *batch, r *router) {
	if b.user != nil {
		if c := a.lookup(b.cgroup); c != nil {
			r.add(c, *b.user)
		}
	}
	r.last = nil
	b.records(func(raw []byte) {
		var ev event.Event
		if err := decode(raw, &ev); err != nil {
			a.m.malformed.Inc()
			a.log.Error("malformed ring buffer record", "err", err)
			if h, ok := peekHeader(raw); ok && h.Slot < uint32(len(a.userDrops)) {
				a.userDrops[h.Slot].Add(1)
			}
			return
		}
		h, _ := peekHeader(raw)
		c := r.last
		if c == nil || c.cgroup != h.CgroupId {
			if c = a.lookup(h.CgroupId); c == nil {
				a.m.orphans.Inc()
				return
			}
			r.last = c
		}
		ev.Time = time.Unix(0, a.clock+int64(h.TsNs))
		r.add(c, ev)
	})
	for c, evs := range r.calls {
		a.route(c, evs)
		delete(r.calls, c)
	}
	for _, req := range b.barrier {
		a.arm(req)
	}
}
