package daemon

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// idleState decides when a bermd started on demand may exit: no call in flight for the idle
// time, and no `berm run` holding the start lock (one that has found this bermd and is about
// to connect holds it shared until its call ends). The lock, taken exclusively, is kept until
// the socket is gone, so a caller either reaches this bermd or starts the next one.
type idleState struct {
	mu       sync.Mutex
	after    time.Duration
	lockPath string
	active   int
	timer    *time.Timer
	done     bool
	fired    chan struct{}
	lock     *os.File
}

func (i *idleState) init(after time.Duration, lockPath string) {
	// Locked: a short idle time can fire check before the timer is stored.
	i.mu.Lock()
	defer i.mu.Unlock()
	i.after, i.lockPath, i.fired = after, lockPath, make(chan struct{})
	if after > 0 {
		i.timer = time.AfterFunc(after, i.check)
	}
}

// begin counts a connection in: no idle exit while it is served.
func (i *idleState) begin() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.active++
	if i.timer != nil {
		i.timer.Stop()
	}
}

// end counts a connection out; the last one restarts the idle clock.
func (i *idleState) end() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.active--
	if i.active == 0 && i.timer != nil && !i.done {
		i.timer.Reset(i.after)
	}
}

func (i *idleState) check() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.active > 0 || i.done {
		return
	}
	// A lock that cannot be opened (its directory removed, as the socket's) is one no caller
	// holds: leave. Only a lock held by a caller (about to reach us) keeps us.
	if f, err := os.OpenFile(i.lockPath, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600); err == nil {
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			i.timer.Reset(min(i.after, time.Second))
			return
		}
		i.lock = f
	}
	i.done = true
	close(i.fired)
}

// release lets the next caller in, once the socket is gone.
func (i *idleState) release() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.lock != nil {
		i.lock.Close()
		i.lock = nil
	}
}
