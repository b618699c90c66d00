package dnsguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// A call's UDP listener is its own socket: every datagram the kernel drops at it (its
// receive buffer full, the call flooding faster than the resolver reads) is the call's.
// The kernel counts them (sk_drops) and, with SO_RXQ_OVFL, hands the count read so far
// with each datagram; SO_MEMINFO reads it at the end, for the drops after the last one.

// skMeminfoDrops is SK_MEMINFO_DROPS in SO_MEMINFO's array (include/uapi/linux/sock_diag.h).
const skMeminfoDrops = 8

// maxDrain bounds the queries read at a call's end from its sockets' queues (a queue holds
// a few hundred: its buffer is what bounds it).
const maxDrain = 1 << 14

func watchOverflow(u *net.UDPConn) error {
	rc, err := u.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_RXQ_OVFL: %w", serr)
	}
	return nil
}

// noteOverflow takes the kernel's drop count of socket i from a datagram's control
// messages: what it grew by since the last one is lost queries of the call.
func (c *Call) noteOverflow(i int, oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4 {
			c.sawDrops(i, binary.NativeEndian.Uint32(m.Data))
		}
	}
}

// sawDrops records socket i's drop counter at total (a 32-bit counter: the difference is
// taken modulo 2^32). Called by socket i's reader only.
func (c *Call) sawDrops(i int, total uint32) {
	if d := total - c.dropsSeen[i]; d != 0 && d < 1<<31 {
		c.dropsSeen[i] = total
		c.dropped.Add(uint64(d))
		c.r.m.dropped.Add(float64(d))
	}
}

// Dropped is how many of the call's UDP queries the kernel dropped before its resolver read
// them: never answered and never recorded. Final once Close has returned.
func (c *Call) Dropped() uint64 { return c.dropped.Load() }

func (c *Call) serveUDP(i int) {
	defer c.udpWG.Done()
	u := c.udp[i]
	buf := make([]byte, 65535)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, from, err := u.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if c.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.noteOverflow(i, oob[:oobn])
		q := append([]byte(nil), buf[:n]...)
		select {
		case c.slots <- struct{}{}:
		default:
			// the call's own flood: it waits for nothing, and nobody else waits for it
			if reply := c.overloaded(q, "udp"); reply != nil {
				u.WriteToUDPAddrPort(reply, from)
			}
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer func() { <-c.slots }()
			if reply := c.answer(q, "udp"); reply != nil {
				u.WriteToUDPAddrPort(reply, from)
			}
		}()
	}
}

// stopUDP ends the call's UDP readers, then reads what is left in its sockets' queues
// (queries its tool sent and never saw answered, often the last ones a tool sends before it
// exits: they are recorded, not answered) and the kernel's final drop counts.
func (c *Call) stopUDP() {
	c.stopping.Store(true)
	for _, u := range c.udp {
		u.SetReadDeadline(time.Unix(1, 0))
	}
	c.udpWG.Wait()
	for i, u := range c.udp {
		rc, err := u.SyscallConn()
		if err != nil {
			continue
		}
		rc.Control(func(fd uintptr) { c.drain(i, int(fd)) })
	}
}

func (c *Call) drain(i, fd int) {
	buf := make([]byte, 65535)
	oob := make([]byte, unix.CmsgSpace(4))
	for k := 0; k < maxDrain; k++ {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		c.noteOverflow(i, oob[:oobn])
		c.unanswered(buf[:n])
	}
	var mem [16]uint32
	l := uint32(unsafe.Sizeof(mem))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0); e != 0 || l < 4*(skMeminfoDrops+1) {
		c.r.log.Warn("dns resolver: the kernel's drop count of a call's socket is unreadable: drops after its last datagram are not counted",
			"call", c.cfg.Name, "err", e)
		return
	}
	c.sawDrops(i, mem[skMeminfoDrops])
}

// unanswered records a query read only at the call's end.
func (c *Call) unanswered(q []byte) {
	var msg layers.DNS
	if err := decode(&msg, q); err != nil || msg.QR || len(msg.Questions) != 1 {
		c.emit(&event.DNS{Verdict: event.DNSRefused, Transport: "udp", Detail: "not answered, the call ended first: not a DNS query"})
		return
	}
	ev := &event.DNS{Name: policy.CanonicalName(string(msg.Questions[0].Name)), Type: typeName(msg.Questions[0].Type),
		Verdict: event.DNSRefused, Transport: "udp", Detail: "not answered: the call ended before the resolver read it"}
	if c.secretIn(ev) {
		ev.Detail = "not answered (the call ended first); " + ev.Detail
	} else {
		c.judgeOnly(ev)
	}
	c.emit(ev)
}

// judgeOnly sets the verdict the policy gives the event's name, for a query not asked.
func (c *Call) judgeOnly(ev *event.DNS) {
	if rules := c.policy.Load().MatchDomains(ev.Name); len(rules) > 0 {
		ev.Verdict, ev.Rule = event.DNSAllowed, rules[0].Field
	} else if c.cfg.Audit {
		ev.Verdict = event.DNSAuditRefused
	}
}
