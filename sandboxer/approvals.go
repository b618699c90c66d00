package sandboxer

import (
	"log/slog"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// supervise takes the call's approval listener from the init's channel (fd, which it owns)
// and starts the call's supervisor. Nil when no listener came: the tool did not start, or the
// supervisor could not (the tool's gated syscalls then fail: closing the listener answers
// them with ENOSYS).
func (l *launch) supervise(fd int, sb *sandbox) *approval.Supervisor {
	r := sandboxinit.NewReader(fd)
	lf, err := sandboxinit.ReadListener(r)
	if err != nil || lf == nil {
		unix.Close(fd)
		if err != nil {
			slog.Error("approval listener", "call", l.spec.CallID, "err", err)
		}
		return nil
	}
	cfg := approval.SupervisorConfig{
		Listener: lf,
		Broker:   l.spec.Approvals,
		Call: approval.CallInfo{CallID: l.spec.CallID, Tenant: l.spec.Tenant, Tool: l.spec.Tool,
			HostUID: sb.ids.UID, HostGID: sb.ids.GID, Landlock: l.env.init.Landlock},
		Rules:  l.env.compiled.Approvals,
		Emit:   func(ev event.Event) { l.call.Emit(ev) },
		Log:    slog.Default(),
		Done:   func() { unix.Close(fd) },
		Redact: l.env.redact,
	}
	if l.env.compiled.Approvals.Has(policy.ApproveExec) {
		cfg.Exec = l.call.ExecGate()
	}
	if l.env.init.ApprovalConnect {
		c := newInitConnector(fd, r)
		cfg.ConnectInet = c.connect
	}
	sup, err := approval.Supervise(cfg)
	if err != nil {
		lf.Close()
		unix.Close(fd)
		slog.Error("approval supervisor", "call", l.spec.CallID, "err", err)
		return nil
	}
	return sup
}

// initConnector asks the sandbox init to connect sockets (sandboxinit.Message.Connect) and
// waits for its answers, which come back in any order.
type initConnector struct {
	fd      int
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan unix.Errno
	closed  bool
}

func newInitConnector(fd int, r *sandboxinit.Reader) *initConnector {
	c := &initConnector{fd: fd, waiting: map[uint64]chan unix.Errno{}}
	go func() {
		for {
			m, files, err := r.Next()
			for _, f := range files {
				f.Close()
			}
			if err != nil {
				break
			}
			if m.Connected == nil {
				continue
			}
			c.mu.Lock()
			if ch, ok := c.waiting[m.Connected.ID]; ok {
				ch <- unix.Errno(m.Connected.Errno)
				delete(c.waiting, m.Connected.ID)
			}
			c.mu.Unlock()
		}
		// The init is gone (the call ended): whoever waits gets a refusal.
		c.mu.Lock()
		c.closed = true
		for id, ch := range c.waiting {
			ch <- unix.ECONNABORTED
			delete(c.waiting, id)
		}
		c.mu.Unlock()
	}()
	return c
}

func (c *initConnector) connect(sock int, addr []byte) unix.Errno {
	ch := make(chan unix.Errno, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return unix.ECONNABORTED
	}
	c.next++
	id := c.next
	c.waiting[id] = ch
	err := sandboxinit.SendFrame(c.fd, sandboxinit.Message{Connect: &sandboxinit.ConnectRequest{ID: id, Addr: addr}}, sock)
	if err != nil {
		delete(c.waiting, id)
	}
	c.mu.Unlock()
	if err != nil {
		return unix.ECONNABORTED
	}
	return <-ch
}
