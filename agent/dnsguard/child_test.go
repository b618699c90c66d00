package dnsguard

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

// The kernel tests run this test binary again inside a call's cgroup: its argument is the
// actions, one per line ("name kind args..."); it prints "name result" for each. Raw
// syscalls, so the addresses reach the hooks exactly as written.
const childName = "dnsguard"

func TestMain(m *testing.M) { testutil.Main(m, testutil.Children{childName: child}) }

func child(spec string) int {
	// unsharenet moves this thread only: every action runs on it
	runtime.LockOSThread()
	out := bufio.NewWriter(os.Stdout)
	for _, line := range strings.Split(strings.TrimSpace(spec), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			fmt.Fprintf(os.Stderr, "bad action %q\n", line)
			return 2
		}
		fmt.Fprintf(out, "%s %s\n", f[0], act(f[1], f[2:]))
	}
	out.Flush()
	return 0
}

func errText(err error) string {
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
}

func sockaddr(addr string, port int) (int, unix.Sockaddr) {
	a := netip.MustParseAddr(addr)
	if a.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: a.As4()}
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: a.As16()}
}

func act(kind string, args []string) string {
	switch kind {
	case "tcp", "udp": // tcp|udp <addr> <port>: a TCP connect, or one datagram with sendto
		port, _ := strconv.Atoi(args[1])
		fam, sa := sockaddr(args[0], port)
		typ := unix.SOCK_STREAM
		if kind == "udp" {
			typ = unix.SOCK_DGRAM
		}
		fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return errText(err)
		}
		defer unix.Close(fd)
		if kind == "udp" {
			err = unix.Sendto(fd, []byte("berm"), 0, sa)
		} else {
			err = unix.Connect(fd, sa)
		}
		if err != nil {
			return errText(err)
		}
		return "ok"
	case "connectloop": // connectloop <addr> <port> <n>: n TCP connects, prints ns per connect
		port, _ := strconv.Atoi(args[1])
		n, _ := strconv.Atoi(args[2])
		fam, sa := sockaddr(args[0], port)
		start := time.Now()
		for i := 0; i < n; i++ {
			fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return errText(err)
			}
			err = unix.Connect(fd, sa)
			unix.Close(fd)
			if err != nil {
				return errText(err)
			}
		}
		return fmt.Sprint(time.Since(start).Nanoseconds() / int64(max(n, 1)))
	case "flood": // flood <server> <n>: n queries for different names, sent without waiting
		n, _ := strconv.Atoi(args[1])
		fam, sa := sockaddr(args[0], 53)
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return errText(err)
		}
		defer unix.Close(fd)
		sent := 0
		for i := 0; i < n; i++ {
			q := layers.DNS{ID: uint16(i), RD: true, Questions: []layers.DNSQuestion{{Name: []byte(fmt.Sprintf("f%d.flood.test", i)), Type: layers.DNSTypeA, Class: layers.DNSClassIN}}}
			buf := gopacket.NewSerializeBuffer()
			q.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true})
			if unix.Sendto(fd, buf.Bytes(), unix.MSG_DONTWAIT, sa) == nil {
				sent++
			}
		}
		return fmt.Sprint(sent)
	case "unsharenet": // a network namespace of its own, loopback down: nothing can leave it
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return errText(err)
		}
		return "ok"
	case "peer": // peer <tcp|udp> <addr> <port>: connect, then the peer getpeername shows
		port, _ := strconv.Atoi(args[2])
		fam, sa := sockaddr(args[1], port)
		typ := unix.SOCK_STREAM
		if args[0] == "udp" {
			typ = unix.SOCK_DGRAM
		}
		fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return errText(err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return errText(err)
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			return errText(err)
		}
		return fromString(peer)
	case "lookup": // lookup <udp|tcp|udpconn> <server addr> <name> <A|AAAA|TXT> [questions]
		return lookup(args)
	}
	return "unknown-action"
}

// lookup sends one DNS query to server:53 as a stub resolver would and prints the rcode and
// the addresses answered ("NOERROR:127.0.0.21,127.0.0.22"). Over UDP it checks that the
// reply comes from the address the query was sent to, as resolver libraries do.
func lookup(args []string) string {
	transport, server, name, typ := args[0], args[1], args[2], args[3]
	nq := 1
	if len(args) > 4 {
		nq, _ = strconv.Atoi(args[4])
	}
	qt := map[string]layers.DNSType{"A": layers.DNSTypeA, "AAAA": layers.DNSTypeAAAA, "TXT": layers.DNSTypeTXT}[typ]
	q := layers.DNS{ID: uint16(rand.Uint32()), RD: true}
	for i := 0; i < nq; i++ {
		q.Questions = append(q.Questions, layers.DNSQuestion{Name: []byte(name), Type: qt, Class: layers.DNSClassIN})
	}
	buf := gopacket.NewSerializeBuffer()
	if err := q.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return errText(err)
	}
	fam, sa := sockaddr(server, 53)
	sockType := unix.SOCK_DGRAM
	if transport == "tcp" {
		sockType = unix.SOCK_STREAM
	}
	fd, err := unix.Socket(fam, sockType|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return errText(err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 5}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var resp []byte
	switch transport {
	case "tcp":
		if err := unix.Connect(fd, sa); err != nil {
			return errText(err)
		}
		f := fdRW(fd)
		if err := writeTCPMsg(f, buf.Bytes()); err != nil {
			return errText(err)
		}
		if resp, err = readTCPMsg(f); err != nil {
			return errText(err)
		}
	case "udp", "udpconn":
		if transport == "udpconn" {
			if err := unix.Connect(fd, sa); err != nil {
				return errText(err)
			}
			err = unix.Send(fd, buf.Bytes(), 0)
		} else {
			err = unix.Sendto(fd, buf.Bytes(), 0, sa)
		}
		if err != nil {
			return errText(err)
		}
		b := make([]byte, 65535)
		n, from, err := unix.Recvfrom(fd, b, 0)
		if err != nil {
			return errText(err)
		}
		if got := fromString(from); got != fmt.Sprintf("%s:53", netip.MustParseAddr(server).Unmap()) {
			return "reply-from-" + got
		}
		resp = b[:n]
	}
	var m layers.DNS
	if err := m.DecodeFromBytes(resp, gopacket.NilDecodeFeedback); err != nil {
		return errText(err)
	}
	if m.ID != q.ID {
		return "wrong-id"
	}
	var addrs []string
	for _, rr := range m.Answers {
		if rr.IP != nil {
			addrs = append(addrs, rr.IP.String())
		}
	}
	return rcodeName(m.ResponseCode) + ":" + strings.Join(addrs, ",")
}

func fromString(sa unix.Sockaddr) string {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return fmt.Sprintf("%s:%d", netip.AddrFrom4(s.Addr), s.Port)
	case *unix.SockaddrInet6:
		return fmt.Sprintf("%s:%d", netip.AddrFrom16(s.Addr).Unmap(), s.Port)
	}
	return fmt.Sprintf("%T", sa)
}

// fdRW reads and writes a socket by its descriptor (no os.File to close it behind our back).
type fdRW int

func (f fdRW) Read(b []byte) (int, error) {
	n, err := unix.Read(int(f), b)
	if n == 0 && err == nil && len(b) > 0 {
		return 0, fmt.Errorf("eof")
	}
	return max(n, 0), err
}

func (f fdRW) Write(b []byte) (int, error) { n, err := unix.Write(int(f), b); return max(n, 0), err }
