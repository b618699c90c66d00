package inject

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// The cookie sock_diag finds for the far end of an accepted connection is the one the
// connecting socket itself reports (SO_COOKIE): the cookie the connect hook keyed.
func TestPeerCookieIsTheConnectingSocketsOwn(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var others []net.Conn
			for range 3 { // neighbours on the same listener: the lookup must pick the right one
				c, err := net.Dial(network, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				others = append(others, c)
				defer c.Close()
			}
			c := others[1]
			rc, _ := c.(*net.TCPConn).SyscallConn()
			var want uint64
			rc.Control(func(fd uintptr) {
				v, err := unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
				if err != nil {
					t.Fatal(err)
				}
				want = v
			})
			got, err := peerCookie(netip.MustParseAddrPort(c.LocalAddr().String()), netip.MustParseAddrPort(c.RemoteAddr().String()))
			if err != nil {
				t.Fatal(err)
			}
			if got != want || got == 0 {
				t.Errorf("cookie %d, want %d", got, want)
			}
		})
	}
}
