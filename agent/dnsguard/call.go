package dnsguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
)

// Pinner opens a call's domain-rule ports at resolved addresses in the kernel
// (*netguard.CallNet).
type Pinner interface {
	Pin(addr netip.Addr, rules []netguard.PinRule) error
}

// CallConfig is one call's side of the resolver.
type CallConfig struct {
	Name   string            // the call's id, for logs
	Policy *policy.NetPolicy // its domain rules (Domains); Update replaces it
	Audit  bool              // audit mode: names no rule allows are answered, and recorded as would-be refusals
	// Upstream overrides the resolver's upstream for this call (host or host:port).
	Upstream string
	Pins     Pinner
	// Emit records a dns event in the call's stream (agent.Emit); it must not block long.
	Emit func(event.Event)
	// Secrets finds chunks of live brokered secrets in names (the node's registry): a query
	// whose name carries one is refused, never forwarded (leak.go). Nil: none looked for.
	Secrets NameScanner
	// CallKey is the call's key: a secret of another call found in a name says both.
	CallKey string
}

// Call is one call's listeners: UDP and TCP on the same port of 127.0.0.1 and ::1.
type Call struct {
	r        *Resolver
	cfg      CallConfig
	upstream string
	policy   atomic.Pointer[policy.NetPolicy]
	port     uint16
	udp      []*net.UDPConn
	tcp      []*net.TCPListener
	pins     pinTable
	resolved Resolved
	slots    chan struct{} // queries in flight to the upstream
	wg       sync.WaitGroup
	udpWG    sync.WaitGroup // the UDP listeners' readers
	stopping atomic.Bool    // Close is stopping the UDP readers
	// dropsSeen is each UDP listener's kernel drop counter as last read (by its reader
	// only); dropped is their growth, the call's queries lost before they were read.
	dropsSeen []uint32
	dropped   atomic.Uint64
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	closed    bool
	alerted   map[string]bool // the finds alerted already (leak.go)
}

// maxTCPConns bounds one call's open TCP DNS connections.
const maxTCPConns = 64

// Attach opens the call's listeners on a port free on both loopbacks; the caller points the
// call's port-53 traffic at Port (netguard.CallNet.SetResolver).
func (r *Resolver) Attach(cfg CallConfig) (*Call, error) {
	if cfg.Policy == nil || cfg.Pins == nil || cfg.Emit == nil {
		return nil, fmt.Errorf("dns resolver: attach call %s: policy, pins and emit are required", cfg.Name)
	}
	c := &Call{r: r, cfg: cfg, upstream: r.upstream, slots: make(chan struct{}, maxInflight), conns: map[net.Conn]struct{}{}}
	c.policy.Store(cfg.Policy)
	if cfg.Upstream != "" {
		up, err := upstreamAddr(cfg.Upstream, "")
		if err != nil {
			return nil, fmt.Errorf("dns resolver: attach call %s: %w", cfg.Name, err)
		}
		c.upstream = up
	}
	c.pins = pinTable{pins: cfg.Pins, grace: r.cfg.Grace, byAddr: map[netip.Addr][]netguard.PinRule{}}
	var err error
	for try := 0; try < 32; try++ {
		if err = c.listen(); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("dns resolver: attach call %s: %w", cfg.Name, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.closeListeners()
		return nil, fmt.Errorf("dns resolver: attach call %s: closed", cfg.Name)
	}
	r.calls[c] = struct{}{}
	r.mu.Unlock()
	c.dropsSeen = make([]uint32, len(c.udp))
	for i := range c.udp {
		c.udpWG.Add(1)
		go c.serveUDP(i)
	}
	for _, l := range c.tcp {
		c.wg.Add(1)
		go c.serveTCP(l)
	}
	return c, nil
}

// listen binds UDP on 127.0.0.1 to a free port, then TCP and ::1 to the same one. A host
// without IPv6 loopback gets IPv4 only (its tools cannot send to ::1 either).
func (c *Call) listen() error {
	u4, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	c.udp = []*net.UDPConn{u4}
	c.port = uint16(u4.LocalAddr().(*net.UDPAddr).Port)
	fail := func(err error) error { c.closeListeners(); c.udp, c.tcp = nil, nil; return err }
	if err := watchOverflow(u4); err != nil {
		return fail(err)
	}
	t4, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(c.port)})
	if err != nil {
		return fail(err)
	}
	c.tcp = append(c.tcp, t4)
	u6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback, Port: int(c.port)})
	if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT) {
		return nil
	}
	if err != nil {
		return fail(err)
	}
	c.udp = append(c.udp, u6)
	if err := watchOverflow(u6); err != nil {
		return fail(err)
	}
	t6, err := net.ListenTCP("tcp6", &net.TCPAddr{IP: net.IPv6loopback, Port: int(c.port)})
	if err != nil {
		return fail(err)
	}
	c.tcp = append(c.tcp, t6)
	return nil
}

// Update replaces the call's domain rules (a hot reload of its network policy): queries from
// now on are judged by pol. Pins already made stay until they expire.
func (c *Call) Update(pol *policy.NetPolicy) {
	if pol != nil {
		c.policy.Store(pol)
	}
}

// Resolved is every address answered for the call; it stays readable after Close.
func (c *Call) Resolved() *Resolved { return &c.resolved }

// Port is the call's resolver port on both loopbacks.
func (c *Call) Port() uint16 { return c.port }

func (c *Call) closeListeners() {
	for _, u := range c.udp {
		u.Close()
	}
	for _, l := range c.tcp {
		l.Close()
	}
}

// Close stops the call's listeners, records the queries left unread in their queues and
// waits for its queries in progress; its pins go with its netguard.CallNet.
func (c *Call) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	// before the listeners close: what is queued at them is read and recorded
	c.stopUDP()
	c.mu.Lock()
	c.closeListeners()
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.r.mu.Lock()
	delete(c.r.calls, c)
	c.r.mu.Unlock()
	return nil
}

func (c *Call) serveTCP(l *net.TCPListener) {
	defer c.wg.Done()
	for {
		conn, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.mu.Lock()
		if c.closed || len(c.conns) >= maxTCPConns {
			c.mu.Unlock()
			conn.Close()
			continue
		}
		c.conns[conn] = struct{}{}
		c.wg.Add(1)
		c.mu.Unlock()
		go func() {
			defer c.wg.Done()
			defer func() {
				c.mu.Lock()
				delete(c.conns, conn)
				c.mu.Unlock()
				conn.Close()
			}()
			c.serveConn(conn)
		}()
	}
}

// tcpIdle is how long a TCP DNS connection may wait for its next query.
const tcpIdle = 10 * time.Second

// serveConn answers a TCP connection's queries in order, each with its 2-byte length prefix.
func (c *Call) serveConn(conn net.Conn) {
	for {
		conn.SetReadDeadline(time.Now().Add(tcpIdle))
		q, err := readTCPMsg(conn)
		if err != nil {
			return
		}
		c.slots <- struct{}{}
		reply := c.answer(q, "tcp")
		<-c.slots
		if reply == nil {
			return
		}
		conn.SetWriteDeadline(time.Now().Add(tcpIdle))
		if err := writeTCPMsg(conn, reply); err != nil {
			return
		}
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

func writeTCPMsg(w io.Writer, msg []byte) error {
	if len(msg) > 65535 {
		return fmt.Errorf("dns message of %d bytes", len(msg))
	}
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}
