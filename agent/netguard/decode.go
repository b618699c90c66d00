package netguard

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

func init() { wire.Register(bpf.WireBermOpBERM_OP_NET_DENY, decodeDeny) }

// decodeDeny reads a refusal of the cgroup sock hooks: a destination, or a socket() refused
// at creation.
func decodeDeny(e *bpf.WireBermNetDeny, ev *event.Event) {
	ev.Kind = event.KindDenial
	d := &event.Denial{Layer: event.LayerCgroupSock, Surface: event.SurfacePolicy, Audit: e.Audit != 0, Rule: ruleName(e.Rule)}
	if e.Nr == unix.SYS_SOCKET {
		d.Object = fmt.Sprintf("socket(family %d, type %d, protocol %d)", e.Family, e.Proto>>16, e.Proto&0xffff)
	} else {
		d.Object = netip.AddrPortFrom(netip.AddrFrom16(e.Addr).Unmap(), e.Port).String()
	}
	ev.Denial = d
}

func ruleName(rule uint32) string {
	if rule == 0 {
		return "default-deny"
	}
	return fmt.Sprintf("rule-%d", rule)
}
