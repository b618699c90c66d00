package netguard

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

// The kernel tests run this test binary again inside the call's cgroup: the child's argument is
// the actions, one per line ("name kind args..."), and the child prints "name result" for each,
// result being "ok" or the errno name. Raw syscalls, so that every family, type and address
// form reaches the kernel exactly as written (the net package would pick families itself).
const childName = "netguard"

func TestMain(m *testing.M) { testutil.Main(m, testutil.Children{childName: child}) }

func child(spec string) int {
	out := bufio.NewWriter(os.Stdout)
	for _, line := range strings.Split(strings.TrimSpace(spec), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			fmt.Fprintf(os.Stderr, "bad action %q\n", line)
			return 2
		}
		name, kind, args := f[0], f[1], f[2:]
		if kind == "loop" { // loop <period> <kind> <args>: until killed, one result per line
			period, _ := time.ParseDuration(args[0])
			for {
				fmt.Fprintf(out, "%s %s\n", name, result(act(args[1], args[2:])))
				out.Flush()
				time.Sleep(period)
			}
		}
		fmt.Fprintf(out, "%s %s\n", name, result(act(kind, args)))
	}
	out.Flush()
	return 0
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
}

func act(kind string, args []string) error {
	switch kind {
	case "tcp", "udp": // tcp|udp <addr> <port>: TCP connect, or one datagram with sendto
		a, err := netip.ParseAddr(args[0])
		if err != nil {
			return err
		}
		port, _ := strconv.Atoi(args[1])
		// an IPv4-mapped address stays IPv6: a dual-stack socket, judged by the IPv6 hooks
		var fam int
		var sa unix.Sockaddr
		if a.Is4() {
			fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: a.As4()}
		} else {
			fam, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: a.As16()}
		}
		typ := unix.SOCK_STREAM
		if kind == "udp" {
			typ = unix.SOCK_DGRAM
		}
		fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// a connect that is let through to an unreachable address must not hang the test
		tv := unix.Timeval{Usec: 500_000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return err
		}
		if kind == "udp" {
			return unix.Sendto(fd, []byte("berm"), 0, sa)
		}
		return unix.Connect(fd, sa)
	case "socket": // socket <family> <type> <protocol>
		var n [3]int
		for i := range n {
			n[i], _ = strconv.Atoi(args[i])
		}
		fd, err := unix.Socket(n[0], n[1]|unix.SOCK_CLOEXEC, n[2])
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	return fmt.Errorf("unknown action %s", kind)
}
