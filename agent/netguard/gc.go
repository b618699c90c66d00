package netguard

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/bpf"
)

// memberGlobal is MEMBARRIER_CMD_GLOBAL: it returns after an RCU grace period (the kernel
// implements it with synchronize_rcu), and cgroup sock programs run inside an RCU read-side
// section, so none that read an old generation is still running afterwards.
const memberGlobal = 1

// gc deletes versions that are out of effect. One grace period covers every version queued
// before it, so a burst of calls ending costs one wait, and none of it on a call's path.
type gc struct {
	g    *Guard
	mu   sync.Mutex
	cond *sync.Cond
	todo []version
	busy bool // a batch taken from todo is being deleted
	quit bool
	done chan struct{}
	errs []error
}

func (c *gc) start(g *Guard) {
	c.g, c.cond, c.done = g, sync.NewCond(&c.mu), make(chan struct{})
	go c.run()
}

// discard queues v for deletion; v must be out of effect already.
func (c *gc) discard(v version) {
	if v.gen == 0 {
		return
	}
	c.mu.Lock()
	c.todo = append(c.todo, v)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// flush waits until every version queued so far is deleted.
func (c *gc) flush() {
	c.mu.Lock()
	for (len(c.todo) > 0 || c.busy) && !c.quit {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// stop ends the cleaner; what is still queued goes with the maps. It returns the deletions
// that failed, whose entries stayed (a generation is never reused: they match nothing).
func (c *gc) stop() error {
	if c.done == nil {
		return nil
	}
	c.mu.Lock()
	c.quit = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
	c.done = nil
	return errors.Join(c.errs...)
}

func (c *gc) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.todo) == 0 && !c.quit {
			c.cond.Wait()
		}
		if c.quit {
			c.mu.Unlock()
			return
		}
		batch := c.todo
		c.todo, c.busy = nil, true
		c.mu.Unlock()

		// Without the grace period (nohz_full kernels refuse it) the deletion order below still
		// fails closed for a program reading the old version meanwhile.
		_, _, _ = unix.Syscall(unix.SYS_MEMBARRIER, memberGlobal, 0, 0)
		var errs []error
		for _, v := range batch {
			if err := c.g.remove(v); err != nil {
				errs = append(errs, err)
			}
		}

		c.mu.Lock()
		c.errs = append(c.errs, errs...)
		c.busy = false
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// remove deletes a version's prefixes, shortest first: every state on the way answers as the
// version did or with the default deny, never with a shorter prefix's broader allow. Then its
// record.
func (g *Guard) remove(v version) error {
	keys := slices.SortedStableFunc(slices.Values(v.keys), func(a, b bpf.WireBermNetKey) int {
		return cmp.Compare(a.Prefixlen, b.Prefixlen)
	})
	var errs []error
	if len(keys) > 0 {
		// a batch stops at its first failure (or is not supported): the rest one by one
		n, err := g.objs.BermNetPolicy.BatchDelete(keys, nil)
		if err != nil {
			err = nil
			for i := n; i < len(keys); i++ {
				if e := g.objs.BermNetPolicy.Delete(&keys[i]); e != nil && !errors.Is(e, ebpf.ErrKeyNotExist) {
					err = e
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete prefixes of policy version %d: %w", v.gen, err))
		}
	}
	if err := g.objs.BermNetGens.Delete(v.gen); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		errs = append(errs, fmt.Errorf("delete policy version %d: %w", v.gen, err))
	}
	return errors.Join(errs...)
}
