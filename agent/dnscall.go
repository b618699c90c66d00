package agent

import (
	"net/netip"

	"github.com/bermsec/berm/agent/event"
)

// markUnresolved flags a connect of a call whose policy names domains to an address its
// resolver never answered for it: the detection rules' view of a tool that goes around the
// names it was given. DNS itself (port 53) goes to the resolver and is not such a connect.
func (c *Call) markUnresolved(ev *event.Event) {
	resolved := c.resolved.Load()
	if ev.Connect == nil || resolved == nil || ev.Connect.Port == 53 {
		return
	}
	if ev.Connect.Family != "inet" && ev.Connect.Family != "inet6" {
		return
	}
	addr, err := netip.ParseAddr(ev.Connect.Addr)
	if err != nil {
		return
	}
	ev.Connect.Unresolved = !resolved.Has(addr)
}
