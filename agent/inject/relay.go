package inject

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/secrets"
)

// The inspecting relay: a call with injected credentials has every other TCP connect its
// policy lets through moved here too (bpf/lib/inject.h, BERM_INJECT_INSPECT). What the tool
// sends is passed on unchanged, but looked at first: the placeholder, in any form agent/secrets
// knows, cuts the connection before the bytes holding it leave. TLS is ended under the call's
// CA for the server name the tool gives and made again to the real server, verified against
// the host's roots. README.md.

const (
	// handshakeTimeout bounds each TLS handshake and the dial to the real server.
	handshakeTimeout = 30 * time.Second
	// relayBuf is what one read of the tool's side takes.
	relayBuf = 32 << 10
)

// placeholderLits are the forms of every credential's placeholder, named by the credential.
func (c *Call) placeholderLits() []secrets.Literal {
	var lits []secrets.Literal
	for _, cr := range c.cfg.Creds {
		for _, f := range secrets.Forms(cr.Placeholder) {
			lits = append(lits, secrets.Literal{Name: cr.Name, Form: f})
		}
	}
	return lits
}

func (c *Call) credNamed(name string) *Credential {
	for i := range c.cfg.Creds {
		if c.cfg.Creds[i].Name == name {
			return &c.cfg.Creds[i]
		}
	}
	return nil
}

// track keeps conn among the call's open connections (Close ends them); false: the call is
// closing.
func (c *Call) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.conns[conn] = true
	return true
}

func (c *Call) untrack(conn net.Conn) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
	conn.Close()
}

// inspect relays a connection the kernel moved here from a destination that is none of the
// call's credential hosts' (orig, from the kernel). Who speaks first decides: the tool with a
// TLS handshake is served under the call's CA; anything else is relayed as it is, inspected.
func (c *Call) inspect(conn net.Conn, orig netip.AddrPort) {
	if orig.Addr().IsLoopback() && orig.Port() == c.port {
		return // the call's own egress port, named by the tool: nothing to relay to
	}
	up, err := net.DialTimeout("tcp", orig.String(), handshakeTimeout)
	if err != nil {
		c.cfg.Log.Debug("inspecting relay: upstream", "call", c.cfg.CallKey, "dst", orig, "err", err)
		return
	}
	if !c.track(up) {
		up.Close()
		return
	}
	defer c.untrack(up)

	br := bufio.NewReaderSize(conn, relayBuf)
	tool := make(chan error, 1)
	go func() { _, err := br.Peek(1); tool <- err }()
	type read struct {
		b   []byte
		err error
	}
	server := make(chan read, 1)
	go func() {
		b := make([]byte, relayBuf)
		n, err := up.Read(b)
		server <- read{b[:n], err}
	}()
	var fromServer []byte // what the server sent before the tool sent anything
	select {
	case err := <-tool:
		_ = up.SetReadDeadline(time.Now())
		r := <-server
		_ = up.SetReadDeadline(time.Time{})
		if err != nil {
			return
		}
		fromServer = r.b
	case r := <-server:
		_ = conn.SetReadDeadline(time.Now())
		<-tool
		_ = conn.SetReadDeadline(time.Time{})
		if len(r.b) == 0 {
			return
		}
		fromServer = r.b
	}
	client := &peekedConn{Conn: conn, r: br}
	if len(fromServer) == 0 { // the tool spoke first: its first byte is there
		if first, err := br.Peek(1); err == nil && first[0] == 0x16 { // a TLS handshake record
			c.inspectTLS(client, up, orig)
			return
		}
	} else {
		if _, err := conn.Write(fromServer); err != nil {
			return
		}
	}
	c.pipe(client, up, orig, "over TCP", orig.String(), int64(len(fromServer)))
}

// inspectTLS ends the tool's TLS under the call's CA for the server name it gives, once the
// real server at orig has shown a certificate for that name the host's roots verify.
func (c *Call) inspectTLS(client net.Conn, up net.Conn, orig netip.AddrPort) {
	var upTLS *tls.Conn
	var sni string
	tc := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni = strings.ToLower(strings.TrimSuffix(h.ServerName, "."))
			if sni == "" {
				return nil, errors.New("no server name: the relay cannot tell which certificate the real server must show")
			}
			// HTTP/2's header compression (HPACK's Huffman code) would hide the placeholder
			// from a byte scan: not offered, clients fall back to HTTP/1.1.
			protos := slices.DeleteFunc(slices.Clone(h.SupportedProtos), func(p string) bool { return p == "h2" || p == "h2c" })
			if len(h.SupportedProtos) > 0 && len(protos) == 0 {
				return nil, fmt.Errorf("only %q offered: not inspected", h.SupportedProtos)
			}
			upTLS = tls.Client(up, &tls.Config{ServerName: sni, RootCAs: c.cfg.Roots, MinVersion: tls.VersionTLS12, NextProtos: protos})
			ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
			defer cancel()
			if err := upTLS.HandshakeContext(ctx); err != nil {
				return nil, fmt.Errorf("real server %s at %s: %w", sni, orig, err)
			}
			leaf, err := c.ca.leaf(sni)
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*leaf}}
			if p := upTLS.ConnectionState().NegotiatedProtocol; p != "" {
				cfg.NextProtos = []string{p}
			}
			return cfg, nil
		},
	})
	_ = client.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		if sni == "" {
			c.alert("inject-no-server-name", "high", fmt.Sprintf("call %s (id %s, tenant %s) sent TLS without a server name to %s: the inspecting relay cannot verify the real server: refused", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, orig))
		}
		c.cfg.Log.Debug("inspecting relay: tls", "call", c.cfg.CallKey, "dst", orig, "sni", sni, "err", err)
		return
	}
	_ = client.SetDeadline(time.Time{})
	defer tc.Close()
	c.pipe(tc, upTLS, orig, "over TLS", sni, 0)
}

// pipe relays tool and server both ways until both are done, scanning what the tool sends
// for the placeholder; on a find it cuts the connection before the read holding the find's
// end is passed on. already: bytes the server sent before.
func (c *Call) pipe(tool, server net.Conn, orig netip.AddrPort, how, host string, already int64) {
	var back atomic.Int64
	back.Store(already)
	var cut atomic.Bool
	done := make(chan struct{})
	go func() {
		n, _ := io.Copy(tool, server)
		back.Add(n)
		if !cut.Load() { // the server is done: the tool hears of it (a cut may still write a refusal)
			closeWrite(tool)
		}
		close(done)
	}()
	f := secrets.NewFinder(c.placeholderLits())
	buf := make([]byte, relayBuf)
	var start []byte // the stream's first bytes: an HTTP request gets a refusal it can show
	for {
		n, err := tool.Read(buf)
		if n > 0 {
			if len(start) < 16 {
				start = append(start, buf[:min(n, 16-len(start))]...)
			}
			if how == "over TCP" && isClientHello(buf[:n]) {
				// TLS begun inside the plain stream (STARTTLS, or a server that spoke first):
				// what it carries would not be seen.
				cut.Store(true)
				server.Close()
				<-done
				c.alert("inject-opaque-tls", "high", fmt.Sprintf("call %s (id %s, tenant %s) began TLS inside a plain TCP stream to %s: the inspecting relay cannot see into it: connection cut", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, orig))
				return
			}
			if l, found := f.Next(buf[:n]); found {
				cut.Store(true)
				server.Close()
				<-done
				status := 0
				if back.Load() == 0 && looksHTTP(start) {
					status = http.StatusForbidden
					writeRefusal(tool, status, "berm: the placeholder of credential "+l.Name+" is sent only to its hosts")
				}
				c.misplacedPlaceholder(c.credNamed(l.Name), l.Encoding, how, host, orig, status)
				return
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			closeWrite(server)
			break
		}
	}
	<-done
}

// misplacedPlaceholder records the placeholder of cr found going to host, which is none of
// cr's: a refused credential event and the alert naming the call.
func (c *Call) misplacedPlaceholder(cr *Credential, encoding, how, host string, orig netip.AddrPort, status int) {
	why := fmt.Sprintf("the placeholder of credential %s (%s) sent %s to %s, not one of its hosts", cr.Name, encoding, how, host)
	c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{Name: cr.Name, Fingerprint: cr.Fingerprint,
		Action: event.CredentialRefused, Result: why, Status: status, Host: host, Encoding: encoding}})
	c.alert("credential-placeholder-misplaced", "high", fmt.Sprintf("call %s (id %s, tenant %s): %s at %s: connection cut", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, why, orig))
}

// isClientHello: b begins a TLS record holding a ClientHello.
func isClientHello(b []byte) bool {
	return len(b) >= 6 && b[0] == 0x16 && b[1] == 0x03 && b[5] == 0x01
}

// bodyRefusedLate records the placeholder found in a request's body once the server had
// answered (the rest of the body was not sent, the connection ends): the events refuse has.
func (c *Call) bodyRefusedLate(cr *Credential, encoding string, where *event.Credential, orig netip.AddrPort) {
	why := fmt.Sprintf("the placeholder of credential %s (%s) in the request's body", cr.Name, encoding)
	ev := *where
	ev.Name, ev.Fingerprint, ev.Action, ev.Result = cr.Name, cr.Fingerprint, event.CredentialRefused, why
	c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &ev})
	c.alert("credential-placeholder-misplaced", "high", fmt.Sprintf("call %s (id %s, tenant %s): %s %s%s at %s: %s: connection cut", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, where.Method, where.Host, where.Path, orig, why))
}

// looksHTTP: b begins an HTTP/1 request line.
func looksHTTP(b []byte) bool {
	m, _, ok := strings.Cut(string(b), " ")
	return ok && len(m) > 0 && strings.ToUpper(m) == m && !strings.ContainsAny(m, "\r\n\x16")
}

func closeWrite(c net.Conn) {
	switch w := c.(type) {
	case interface{ CloseWrite() error }:
		_ = w.CloseWrite()
	default:
		_ = c.Close()
	}
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *peekedConn) CloseWrite() error {
	if w, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return w.CloseWrite()
	}
	return p.Conn.Close()
}

// bodyScan passes a request body to a credential host on, looking for the placeholder: where
// berm puts the secret is the credential's header (or query parameter), never the body, so
// the placeholder there is refused before the read holding it reaches the server.
type bodyScan struct {
	r     io.ReadCloser
	f     *secrets.Finder
	mu    sync.Mutex
	found *secrets.Literal
}

var errPlaceholderInBody = errors.New("the placeholder in the request's body")

func (c *Call) scanBody(body io.ReadCloser) *bodyScan {
	return &bodyScan{r: body, f: secrets.NewFinder(c.placeholderLits())}
}

func (b *bodyScan) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.found != nil {
		return 0, errPlaceholderInBody
	}
	n, err := b.r.Read(p)
	if n > 0 {
		if l, ok := b.f.Next(p[:n]); ok {
			b.found = &l
			return 0, errPlaceholderInBody
		}
	}
	return n, err
}

func (b *bodyScan) Close() error { return b.r.Close() }

// refused is the placeholder the body held, if it did.
func (b *bodyScan) refused() (secrets.Literal, bool) {
	if b == nil {
		return secrets.Literal{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.found == nil {
		return secrets.Literal{}, false
	}
	return *b.found, true
}
