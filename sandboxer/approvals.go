package sandboxer

import (
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/approval"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// supervise takes the call's approval listener from the init's channel (fd, which it closes)
// and starts the call's supervisor. Nil when no listener came: the tool did not start, or the
// supervisor could not (the tool's gated syscalls then fail: a listener nobody reads makes
// them wait, and its close answers them with ENOSYS).
func (l *launch) supervise(fd int, sb *sandbox) *approval.Supervisor {
	lf, err := sandboxinit.ReadListener(fd)
	unix.Close(fd)
	if err != nil || lf == nil {
		if err != nil {
			slog.Error("approval listener", "call", l.spec.CallID, "err", err)
		}
		return nil
	}
	sup, err := approval.Supervise(approval.SupervisorConfig{
		Listener: lf,
		Broker:   l.spec.Approvals,
		Call: approval.CallInfo{CallID: l.spec.CallID, Tenant: l.spec.Tenant, Tool: l.spec.Tool,
			HostUID: sb.ids.UID, HostGID: sb.ids.GID, Landlock: l.env.init.Landlock},
		Rules: l.env.compiled.Approvals,
		Emit:  func(ev event.Event) { l.call.Emit(ev) },
	})
	if err != nil {
		lf.Close()
		slog.Error("approval supervisor", "call", l.spec.CallID, "err", err)
		return nil
	}
	return sup
}
