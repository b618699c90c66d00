// Package dnstest is a real DNS server for tests, on loopback (UDP and TCP on one port),
// answering from a zone the test gives: what berm's resolver asks as its upstream.
package dnstest

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Zone is what the test's upstream DNS server knows: owner name -> its records.
type Zone map[string][]layers.DNSResourceRecord

// A is an address record (A or AAAA by the address).
func A(name, ip string, ttl uint32) layers.DNSResourceRecord {
	addr := netip.MustParseAddr(ip)
	typ := layers.DNSTypeA
	if addr.Is6() {
		typ = layers.DNSTypeAAAA
	}
	return layers.DNSResourceRecord{Name: []byte(name), Type: typ, Class: layers.DNSClassIN, TTL: ttl, IP: net.IP(addr.AsSlice())}
}

// CNAME is an alias record.
func CNAME(name, target string, ttl uint32) layers.DNSResourceRecord {
	return layers.DNSResourceRecord{Name: []byte(name), Type: layers.DNSTypeCNAME, Class: layers.DNSClassIN, TTL: ttl, CNAME: []byte(target)}
}

// Server is a real DNS server on loopback (UDP and TCP on one port), answering from its
// zone as an authoritative server would: the question's records, following CNAMEs; names it
// does not know get NXDOMAIN. It counts the names it was asked.
type Server struct {
	Addr string // host:port, UDP and TCP
	zone Zone
	udp  *net.UDPConn
	tcp  *net.TCPListener

	mu    sync.Mutex
	asked map[string]int
	raw   [][]byte // every message received, as it arrived
}

// Start runs a server until the test ends.
func Start(t testing.TB, z Zone) *Server {
	t.Helper()
	return StartAt(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0), z)
}

// StartAt runs a server on at (an IPv4 address; port 0: any port free for UDP and TCP).
func StartAt(t testing.TB, at netip.AddrPort, z Zone) *Server {
	t.Helper()
	u := &Server{zone: z, asked: map[string]int{}}
	ip := net.IP(at.Addr().AsSlice())
	var err error
	for try := 0; ; try++ {
		u.udp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: int(at.Port())})
		if err != nil {
			t.Fatal(err)
		}
		port := u.udp.LocalAddr().(*net.UDPAddr).Port
		u.tcp, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: ip, Port: port})
		if err == nil {
			break
		}
		u.udp.Close()
		if try > 20 {
			t.Fatal(err)
		}
	}
	u.Addr = u.udp.LocalAddr().String()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := u.udp.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if r := u.respond(buf[:n]); r != nil {
				u.udp.WriteToUDPAddrPort(r, from)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := u.tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					q, err := readTCPMsg(c)
					if err != nil {
						return
					}
					if r := u.respond(q); r == nil || writeTCPMsg(c, r) != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { u.udp.Close(); u.tcp.Close(); wg.Wait() })
	return u
}

func (u *Server) respond(q []byte) []byte {
	u.mu.Lock()
	u.raw = append(u.raw, append([]byte(nil), q...))
	u.mu.Unlock()
	var m layers.DNS
	if err := m.DecodeFromBytes(q, gopacket.NilDecodeFeedback); err != nil || len(m.Questions) != 1 {
		return nil
	}
	name := strings.ToLower(string(m.Questions[0].Name)) // names compare without case
	u.mu.Lock()
	u.asked[name]++
	u.mu.Unlock()
	r := layers.DNS{ID: m.ID, QR: true, AA: true, RD: m.RD, RA: true, Questions: m.Questions}
	cur := name
	for hop := 0; hop < 10; hop++ {
		rrs, ok := u.zone[cur]
		if !ok {
			if hop == 0 {
				r.ResponseCode = layers.DNSResponseCodeNXDomain
			}
			break
		}
		next := ""
		for _, rr := range rrs {
			if rr.Type == m.Questions[0].Type || rr.Type == layers.DNSTypeCNAME || rr.Name != nil && string(rr.Name) != cur {
				r.Answers = append(r.Answers, rr)
			}
			if rr.Type == layers.DNSTypeCNAME {
				next = string(rr.CNAME)
			}
		}
		if next == "" {
			break
		}
		cur = next
	}
	buf := gopacket.NewSerializeBuffer()
	if err := r.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil
	}
	return buf.Bytes()
}

// Count is how many times name was asked.
func (u *Server) Count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.asked[name]
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeTCPMsg(w io.Writer, msg []byte) error {
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}

// Names are the names the server was asked, lowercased, in no order.
func (u *Server) Names() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.asked))
	for n := range u.asked {
		out = append(out, n)
	}
	return out
}

// Received is every message the server received (UDP datagrams and TCP messages), byte for
// byte as it arrived, in the order read.
func (u *Server) Received() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([][]byte, len(u.raw))
	for i, b := range u.raw {
		out[i] = append([]byte(nil), b...)
	}
	return out
}
