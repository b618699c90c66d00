package inject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerCookie is the socket cookie of the TCP socket on this host whose local end is client
// and whose peer is server (the tool's socket of a connection berm accepted), asked of the
// kernel (sock_diag): the same cookie the connect hook keyed the connect's destination by.
func peerCookie(client, server netip.AddrPort) (uint64, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	family := uint8(unix.AF_INET)
	if !client.Addr().Is4() {
		family = unix.AF_INET6
	}
	// nlmsghdr (16) + inet_diag_req_v2 (8 + inet_diag_sockid 48)
	const reqLen = 16 + 8 + 48
	req := make([]byte, reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], reqLen)
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1)
	r := req[16:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], client.Port())
	binary.BigEndian.PutUint16(id[2:], server.Port())
	putAddr(id[4:20], client.Addr())
	putAddr(id[20:36], server.Addr())
	ne.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if e := int32(ne.Uint32(m.Data)); e != 0 {
					return 0, fmt.Errorf("sock_diag %s -> %s: %w", client, server, unix.Errno(-e))
				}
			}
		case unix.SOCK_DIAG_BY_FAMILY:
			// inet_diag_msg: family, state, timer, retrans, then the sockid (cookie at 40)
			if len(m.Data) < 4+48 {
				return 0, errors.New("sock_diag: short answer")
			}
			sid := m.Data[4:]
			return uint64(ne.Uint32(sid[40:])) | uint64(ne.Uint32(sid[44:]))<<32, nil
		}
	}
	return 0, fmt.Errorf("sock_diag %s -> %s: no socket", client, server)
}

// putAddr writes an address as inet_diag_sockid holds it: IPv4 in the first word.
func putAddr(dst []byte, a netip.Addr) {
	if a.Is4() {
		b := a.As4()
		copy(dst, b[:])
		return
	}
	b := a.As16()
	copy(dst, b[:])
}
