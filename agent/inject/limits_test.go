package inject

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/netguard"
)

// A call's egress holds at most MaxConns connections: one more is closed at once and counted;
// connections that never send a handshake or a request are closed after HeadWait, and their
// slots serve the call's next connections. (Real sockets and sock_diag; the kernel's record of
// where each connection was going is stood in for.)
func TestIdleConnectionsLoseTheirSlotAndTheExcessIsClosedAtOnce(t *testing.T) {
	var port atomic.Uint32
	m := NewMetrics(nil)
	c, err := Start(Config{CallKey: "k", CallID: "limits", CgroupID: 7, MaxConns: 2, HeadWait: 200 * time.Millisecond, Metrics: m,
		Creds: []Credential{{Name: "api", Value: []byte("s3cret"), Placeholder: []byte("p4ceho"), Hosts: []string{"api.test"}, Header: "Authorization", Format: "Bearer {}"}},
		Orig: func(uint64) (netguard.Orig, error) {
			return netguard.Orig{CgroupID: 7, Addr: netip.MustParseAddrPort("127.0.0.1:80"), ProxyPort: uint16(port.Load())}, nil
		},
		Emit: func(event.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port.Store(uint32(c.Port()))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.Port())))
	var held []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNRESET) { // closed by the egress before the dial returned
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		held = append(held, conn)
	}
	for i, conn := range held {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("connection %d: read data, want it closed", i)
		}
	}
	if got := testutil.ToFloat64(m.capped); got != 1 {
		t.Errorf("%v connections closed at once, want 1", got)
	}
	if got := testutil.ToFloat64(m.idle); got != 2 {
		t.Errorf("%v idle connections closed, want 2", got)
	}
	// the slots are free again: a request is read and answered (502: nothing listens upstream)
	var line string
	for range 50 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n"))
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, _ = bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if line != "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(line, "HTTP/1.1 502") {
		t.Errorf("a request after the idle ones went: %q, want a 502 from the egress", line)
	}
}
