// Package inject is berm's injecting egress: a call's credential delivered with `inject:`
// reaches the tool as a placeholder, and the secret is put into the tool's HTTP requests to
// the credential's hosts here, on their way out. The kernel sends the call's connects to those
// hosts' addresses here (bpf/lib/inject.h); TLS is ended under a per-call CA whose key never
// leaves this process, and the real server is verified against the host's roots. README.md.
package inject

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/secrets"
)

// Credential is one injected credential of a call.
type Credential struct {
	Name        string
	Value       []byte // the secret: here and in the node's registry, never in the call
	Placeholder []byte // what the tool holds instead
	Fingerprint string
	Hosts       []string
	Header      string // canonical
	Format      string // with {}
	// BasicUser: the header's value is "Basic " and base64 of BasicUser:secret (the tool sends
	// BasicUser:placeholder); Header is Authorization.
	BasicUser string
	// Query: the secret goes in the URL's query parameter of this name instead of a header
	// (the tool sends NAME=placeholder).
	Query string
}

// Config is one call's side of the injecting egress.
type Config struct {
	CallKey, CallID, Tenant string
	CgroupID                uint64
	Creds                   []Credential
	// Orig is where the tool's socket with this cookie was going (netguard.CallNet.InjectOrig).
	Orig func(cookie uint64) (netguard.Orig, error)
	// Emit adds an event to the call's trail.
	Emit func(event.Event)
	// Roots verify the real servers (nil: the host's).
	Roots *x509.CertPool
	// Life bounds the call's CA (its wall time).
	Life time.Duration
	Log  *slog.Logger
	// Metrics are the node's egress counters (nil: none).
	Metrics *Metrics
	// MaxConns, HeadWait and IdleWait bound what the call holds of the egress (zero: the
	// package's MaxConns, HeadWait, IdleWait).
	MaxConns           int
	HeadWait, IdleWait time.Duration
}

// Call is one call's injecting egress: a listener on both loopbacks on one port.
type Call struct {
	cfg  Config
	ca   *ca
	port uint16
	lns  []net.Listener
	up   *http.Transport

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
	seen   map[string]bool // alerts raised, once per credential, place and host
	capped uint64          // connections closed at once: the call held MaxConns
}

type origKey struct{}

// Start opens the call's listeners and its CA.
func Start(cfg Config) (*Call, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Life <= 0 {
		cfg.Life = 24 * time.Hour
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = MaxConns
	}
	if cfg.HeadWait <= 0 {
		cfg.HeadWait = HeadWait
	}
	if cfg.IdleWait <= 0 {
		cfg.IdleWait = IdleWait
	}
	a, err := newCA(cfg.CallKey, cfg.Life+time.Hour)
	if err != nil {
		return nil, err
	}
	c := &Call{cfg: cfg, ca: a, conns: map[net.Conn]bool{}, seen: map[string]bool{}}
	if err := c.listen(); err != nil {
		return nil, err
	}
	c.up = &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			o, _ := ctx.Value(origKey{}).(netip.AddrPort)
			if !o.IsValid() {
				return nil, errors.New("no destination from the kernel")
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", o.String())
		},
		TLSClientConfig:       &tls.Config{RootCAs: cfg.Roots, MinVersion: tls.VersionTLS12},
		DisableCompression:    true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	for _, ln := range c.lns {
		c.wg.Add(1)
		go c.serve(ln)
	}
	return c, nil
}

// listen takes one port on 127.0.0.1 and ::1 alike (a connect moved from an IPv6 socket goes
// to ::1, from an IPv4 or dual-stack one to 127.0.0.1).
func (c *Call) listen() error {
	var last error
	for range 16 {
		l4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("injecting egress: %w", err)
		}
		p := l4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", p))
		if err != nil {
			l4.Close()
			last = err
			continue
		}
		c.lns, c.port = []net.Listener{l4, l6}, uint16(p)
		return nil
	}
	return fmt.Errorf("injecting egress: no port free on both loopbacks: %w", last)
}

// Port is the call's port on both loopbacks.
func (c *Call) Port() uint16 { return c.port }

// CAPEM is the call's CA certificate, for its trust store.
func (c *Call) CAPEM() []byte { return c.ca.pem }

// Close ends the call's egress: listeners, open connections, and its CA's key.
func (c *Call) Close() error {
	c.mu.Lock()
	c.closed = true
	for _, ln := range c.lns {
		ln.Close()
	}
	for conn := range c.conns {
		conn.Close()
	}
	capped := c.capped
	c.mu.Unlock()
	c.wg.Wait()
	c.up.CloseIdleConnections()
	c.ca.revoke()
	if capped > 0 {
		c.alert("inject-connection-cap", "medium", fmt.Sprintf("call %s (id %s, tenant %s): %d connections to its injecting egress closed at once in all: it held its cap of %d open", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, capped, c.cfg.MaxConns))
	}
	return nil
}

// serve accepts the call's connections, at most MaxConns open at once: past it a connection
// is closed at once (reset), counted, and alerted once. An accept that fails (no file
// descriptor left) is retried after a pause: the listener stays.
func (c *Call) serve(ln net.Listener) {
	defer c.wg.Done()
	var pause time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			c.cfg.Log.Warn("injecting egress: accept", "call_id", c.cfg.CallID, "err", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			conn.Close()
			return
		}
		if len(c.conns) >= c.cfg.MaxConns {
			c.capped++
			first := c.capped == 1
			c.mu.Unlock()
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			conn.Close()
			c.cfg.Metrics.overCap()
			if first {
				c.alert("inject-connection-cap", "medium", fmt.Sprintf("call %s (id %s, tenant %s) holds %d connections open to its injecting egress, its cap: more are closed at once", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, c.cfg.MaxConns))
			}
			continue
		}
		c.conns[conn] = true
		c.wg.Add(1)
		c.mu.Unlock()
		c.cfg.Metrics.opened(1)
		go func() {
			defer c.wg.Done()
			defer func() {
				c.mu.Lock()
				delete(c.conns, conn)
				c.mu.Unlock()
				conn.Close()
				c.cfg.Metrics.opened(-1)
			}()
			c.handle(&idleConn{Conn: conn, idle: c.cfg.IdleWait})
		}()
	}
}

// idleConn bounds each write to the tool (a tool that stops reading frees its slot).
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// linger ends a connection the egress is done with politely: its side closed for writing, and
// what the tool still sends read (and dropped) for a moment, so that the refusal it was
// written is read before the connection is reset for unread data.
func linger(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, maxDrain))
}

// handle serves one connection the kernel moved here: where it was going comes from the
// kernel (the tool's socket's cookie), never from what the tool sends.
func (c *Call) handle(conn net.Conn) {
	client := netip.MustParseAddrPort(conn.RemoteAddr().String())
	server := netip.MustParseAddrPort(conn.LocalAddr().String())
	cookie, err := peerCookie(unmapPort(client), unmapPort(server))
	var o netguard.Orig
	if err == nil {
		o, err = c.cfg.Orig(cookie)
	}
	if err == nil && (o.CgroupID != c.cfg.CgroupID || o.ProxyPort != c.port) {
		err = fmt.Errorf("socket of cgroup %d for port %d", o.CgroupID, o.ProxyPort)
	}
	if err != nil {
		// Not a connect the hooks moved for this call: nothing goes out.
		c.cfg.Metrics.refusedBy("inject-unmoved")
		c.alert("inject-unmoved", "high", fmt.Sprintf("a connection to call %s's injecting egress that the kernel did not move there (%s): refused", c.cfg.CallKey, err))
		return
	}
	if o.Inspect { // none of the credential hosts': relayed, inspected for the placeholder (relay.go)
		c.inspect(conn, o.Addr)
		return
	}
	switch o.Addr.Port() {
	case 443:
		c.serveTLS(conn, o.Addr)
	case 80:
		c.serveHTTP(conn, bufio.NewReader(conn), "", "http", o.Addr)
	}
}

func unmapPort(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// hostsFor are the call's credentials naming host.
func (c *Call) credsFor(host string) []*Credential {
	var out []*Credential
	for i := range c.cfg.Creds {
		if slices.Contains(c.cfg.Creds[i].Hosts, host) {
			out = append(out, &c.cfg.Creds[i])
		}
	}
	return out
}

func (c *Call) serveTLS(conn net.Conn, orig netip.AddrPort) {
	var sni string
	tc := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}, // HTTP/2 clients fall back to 1.1: one request syntax to judge
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni = strings.ToLower(strings.TrimSuffix(h.ServerName, "."))
			if len(c.credsFor(sni)) == 0 {
				return nil, fmt.Errorf("server name %q is none of the call's credential hosts", sni)
			}
			return c.ca.leaf(sni)
		},
	})
	_ = conn.SetDeadline(time.Now().Add(c.cfg.HeadWait))
	if err := tc.Handshake(); err != nil {
		if isTimeout(err) {
			c.cfg.Metrics.idleClosed()
		}
		if sni != "" && len(c.credsFor(sni)) == 0 {
			c.alert("inject-foreign-host", "high", fmt.Sprintf("call %s sent TLS for %q to %s, an address of its credential hosts, on the port berm injects on: refused", c.cfg.CallKey, sni, orig))
		}
		return
	}
	_ = conn.SetDeadline(time.Time{})
	c.serveHTTP(tc, bufio.NewReader(tc), sni, "https", orig)
}

// serveHTTP relays the connection's requests one by one (HTTP/1.1, keep-alive), each read
// strictly (frame.go): what cannot be read one way only is refused, never relayed.
func (c *Call) serveHTTP(conn net.Conn, br *bufio.Reader, sni, scheme string, orig netip.AddrPort) {
	for {
		req, body, err := readRequest(br, conn, c.cfg.HeadWait, c.cfg.IdleWait)
		var fe *frameError
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return
		case isTimeout(err):
			c.cfg.Metrics.idleClosed()
			return
		case errors.Is(err, errPrior):
			// an HTTP/2 client: a SETTINGS frame and GOAWAY (HTTP_1_1_REQUIRED) are what it reads
			c.refuseConn(conn, sni, orig, "inject-protocol", http.StatusHTTPVersionNotSupported, err.Error())
			_, _ = conn.Write(h2Refusal)
			return
		case errors.As(err, &fe):
			rule := "inject-framing"
			if fe.status == http.StatusHTTPVersionNotSupported {
				rule = "inject-protocol"
			}
			c.refuseConn(conn, sni, orig, rule, fe.status, "ambiguous or malformed request: "+fe.why)
			writeRefusal(conn, fe.status, "berm: "+fe.why)
			linger(conn)
			return
		default:
			return
		}
		ok := c.relay(conn, req, sni, scheme, orig)
		if !body.finish() || !ok {
			linger(conn)
			return
		}
	}
}

// h2Refusal is HTTP/2's server preface (an empty SETTINGS frame) and a GOAWAY frame of
// last stream 0, error HTTP_1_1_REQUIRED.
var h2Refusal = []byte{
	0, 0, 0, 4, 0, 0, 0, 0, 0, // SETTINGS, length 0, stream 0
	0, 0, 8, 7, 0, 0, 0, 0, 0, // GOAWAY, length 8, stream 0
	0, 0, 0, 0, // last stream id
	0, 0, 0, 0xd, // HTTP_1_1_REQUIRED
}

// refuseConn records a request refused before it could be read as one: its host is the TLS
// name, or unknown (the address the tool named).
func (c *Call) refuseConn(conn net.Conn, sni string, orig netip.AddrPort, rule string, status int, why string) {
	host := sni
	if host == "" {
		host = orig.Addr().String()
	}
	c.refused(c.concerned(nil, sni), &event.Credential{Host: host}, status, rule, why)
	c.alert(rule, "high", fmt.Sprintf("call %s (id %s, tenant %s): a request to %s at %s: %s: refused", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, host, orig, why))
}

// concerned are the credentials a refusal is about: those whose placeholder the request
// carries; else those naming its host; else all the call's (the kernel moved the connection
// here for an address of one of their hosts).
func (c *Call) concerned(req *http.Request, host string) []*Credential {
	if req != nil {
		if cr := c.placeholderIn(req); cr != nil {
			return []*Credential{cr}
		}
	}
	if crs := c.credsFor(host); len(crs) > 0 {
		return crs
	}
	var all []*Credential
	for i := range c.cfg.Creds {
		all = append(all, &c.cfg.Creds[i])
	}
	return all
}

// refused is a refused credential event for each of creds, and the refusal counted.
func (c *Call) refused(creds []*Credential, where *event.Credential, status int, rule, why string) {
	c.cfg.Metrics.refusedBy(rule)
	for _, cr := range creds {
		ev := *where
		ev.Name, ev.Fingerprint, ev.Action, ev.Result, ev.Status = cr.Name, cr.Fingerprint, event.CredentialRefused, why, status
		c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &ev})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// relay judges one request, puts the secret in, sends it to the server the kernel says the
// tool named, and hands back the response with the secret redacted. false: the connection
// ends.
func (c *Call) relay(conn net.Conn, req *http.Request, sni, scheme string, orig netip.AddrPort) bool {
	host := strings.ToLower(strings.TrimSuffix(hostOnly(req.Host), "."))
	where := &event.Credential{Host: host, Method: req.Method, Path: req.URL.Path}
	refuse := func(status int, creds []*Credential, rule, why string) bool {
		c.refused(creds, where, status, rule, why)
		c.alert(rule, "high", fmt.Sprintf("call %s (id %s, tenant %s): %s %s%s at %s: %s: refused", c.cfg.CallKey, c.cfg.CallID, c.cfg.Tenant, req.Method, host, req.URL.Path, orig, why))
		writeRefusal(conn, status, "berm: "+why)
		drain(req)
		return false
	}
	concerned := c.concerned(req, host)
	switch {
	case req.Method == http.MethodConnect:
		return refuse(http.StatusMethodNotAllowed, concerned, "inject-connect", fmt.Sprintf("CONNECT %s through berm's injecting egress", req.Host))
	case req.ProtoMajor != 1:
		return refuse(http.StatusHTTPVersionNotSupported, concerned, "inject-protocol", "only HTTP/1.x is relayed")
	case req.Header.Get("Upgrade") != "" || req.Header.Get("HTTP2-Settings") != "":
		// a switched protocol (h2c, a WebSocket) would be bytes the egress cannot judge or redact
		return refuse(http.StatusNotImplemented, concerned, "inject-upgrade", fmt.Sprintf("Upgrade %q: only HTTP/1.1 is relayed", req.Header.Get("Upgrade")))
	case sni != "" && host != sni:
		return refuse(http.StatusMisdirectedRequest, concerned, "inject-host-mismatch", fmt.Sprintf("Host %q is not the TLS server name %q", host, sni))
	case len(c.credsFor(host)) == 0:
		return refuse(http.StatusForbidden, concerned, "inject-foreign-host", fmt.Sprintf("host %q is none of the call's credential hosts", host))
	}
	// The placeholder goes only in its credential's header, to its hosts: anywhere else in
	// the request (path, query, another header, another credential's host) is a leak attempt.
	var used []*Credential
	for i := range c.cfg.Creds {
		cr := &c.cfg.Creds[i]
		if where, found := c.misplaced(req, cr, host); found {
			return refuse(http.StatusForbidden, []*Credential{cr}, "credential-placeholder-misplaced", fmt.Sprintf("the placeholder of credential %s in the request's %s", cr.Name, where))
		}
		if !slices.Contains(cr.Hosts, host) {
			continue
		}
		if cr.Query != "" {
			if q, ok := cr.putQuery(req.URL.RawQuery); ok {
				req.URL.RawQuery = q
				used = append(used, cr)
			}
			continue
		}
		vals := req.Header.Values(cr.Header)
		for j, v := range vals {
			if nv, ok := cr.put(v); ok {
				vals[j] = nv
				used = append(used, cr)
			}
		}
	}
	out := req.Clone(context.WithValue(req.Context(), origKey{}, orig))
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = scheme, req.Host
	// identity, so what the server echoes can be redacted
	out.Header.Del("Accept-Encoding")
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection"} {
		out.Header.Del(h)
	}
	var body *bodyScan // the placeholder in the body is refused (relay.go)
	if out.Body != nil && out.Body != http.NoBody {
		body = c.scanBody(out.Body)
		out.Body = body
	}
	resp, err := c.up.RoundTrip(out)
	if l, found := body.refused(); found {
		if resp != nil {
			resp.Body.Close()
		}
		creds := concerned
		if cr := c.credNamed(l.Name); cr != nil {
			creds = []*Credential{cr}
		}
		return refuse(http.StatusForbidden, creds, "credential-placeholder-misplaced", fmt.Sprintf("the placeholder of credential %s (%s) in the request's body", l.Name, l.Encoding))
	}
	if err != nil {
		// the error may quote the URL, whose query may now hold a secret
		msg := err.Error()
		for _, cr := range used {
			for _, v := range []string{url.QueryEscape(string(cr.Value)), string(cr.Value)} {
				msg = strings.ReplaceAll(msg, v, "[berm:redacted:"+cr.Name+"]")
			}
		}
		err = errors.New(msg)
		for _, cr := range used {
			ev := *where
			ev.Name, ev.Fingerprint, ev.Action, ev.Result = cr.Name, cr.Fingerprint, event.CredentialInjected, "upstream: "+err.Error()
			c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &ev})
		}
		writeRefusal(conn, http.StatusBadGateway, "berm: upstream "+host+": "+err.Error())
		return false
	}
	if err := decoded(resp); err != nil {
		resp.Body.Close()
		why := "response refused: " + err.Error()
		for _, cr := range used {
			ev := *where
			ev.Name, ev.Fingerprint, ev.Action, ev.Status, ev.Result = cr.Name, cr.Fingerprint, event.CredentialInjected, http.StatusBadGateway, why
			c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &ev})
		}
		return refuse(http.StatusBadGateway, c.credsFor(host), "inject-response-encoding", why)
	}
	n, werr := c.respond(conn, req, resp)
	if l, found := body.refused(); found { // after the server had answered: the connection ends
		c.bodyRefusedLate(c.credNamed(l.Name), l.Encoding, where, orig)
		return false
	}
	for _, cr := range used {
		ev := *where
		ev.Name, ev.Fingerprint, ev.Action, ev.Status, ev.Bytes = cr.Name, cr.Fingerprint, event.CredentialInjected, resp.StatusCode, n
		c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &ev})
	}
	return werr == nil && !req.Close && !resp.Close
}

// put is v with the placeholder replaced by the secret where the format has it: the whole
// value is Format with the placeholder in its place. ok false: v is not that.
func (cr *Credential) put(v string) (string, bool) {
	if cr.Query != "" {
		return v, false
	}
	if cr.BasicUser != "" {
		if v != "Basic "+base64.StdEncoding.EncodeToString([]byte(cr.BasicUser+":"+string(cr.Placeholder))) {
			return v, false
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(cr.BasicUser+":"+string(cr.Value))), true
	}
	pre, post, _ := strings.Cut(cr.Format, "{}")
	if !strings.HasPrefix(v, pre) || !strings.HasSuffix(v, post) || len(v) != len(pre)+len(cr.Placeholder)+len(post) {
		return v, false
	}
	if v[len(pre):len(v)-len(post)] != string(cr.Placeholder) {
		return v, false
	}
	return pre + string(cr.Value) + post, true
}

// putQuery is the raw query q with the query credential's parameter, where it is exactly
// NAME=placeholder, holding the secret (escaped). ok false: no such parameter.
func (cr *Credential) putQuery(q string) (string, bool) {
	parts := strings.Split(q, "&")
	ok := false
	for i, p := range parts {
		if cr.isOwnParam(p) {
			parts[i] = cr.Query + "=" + url.QueryEscape(string(cr.Value))
			ok = true
		}
	}
	return strings.Join(parts, "&"), ok
}

// isOwnParam: the raw query part p is NAME=placeholder of the query credential.
func (cr *Credential) isOwnParam(p string) bool {
	k, v, found := strings.Cut(p, "=")
	if !found || k != cr.Query {
		return false
	}
	uv, err := url.QueryUnescape(v)
	return err == nil && uv == string(cr.Placeholder)
}

// misplaced says where in req the credential's placeholder shows where berm does not put the
// secret in: the URL (raw or decoded), a header other than its own, its own header sent to a
// host it does not name, or its own header in a shape other than its format.
func (c *Call) misplaced(req *http.Request, cr *Credential, host string) (string, bool) {
	ph := string(cr.Placeholder)
	rawQuery := req.URL.RawQuery
	if cr.Query != "" { // its own parameter, to its own hosts, is where it goes
		var rest []string
		for _, p := range strings.Split(rawQuery, "&") {
			if cr.isOwnParam(p) {
				if !slices.Contains(cr.Hosts, host) {
					return "query parameter " + cr.Query + " to host " + host, true
				}
				continue
			}
			rest = append(rest, p)
		}
		rawQuery = strings.Join(rest, "&")
	}
	if strings.Contains(req.URL.RawPath+req.URL.Path+"?"+rawQuery, ph) {
		return "path or query", true
	}
	if q, err := url.QueryUnescape(rawQuery); err == nil && strings.Contains(q, ph) {
		return "query", true
	}
	if strings.Contains(req.Host, ph) {
		return "host", true
	}
	if cr.BasicUser != "" { // its placeholder is base64 in its own header
		for _, v := range req.Header.Values(cr.Header) {
			if _, ok := cr.put(v); ok && !slices.Contains(cr.Hosts, host) {
				return "header " + cr.Header + " to host " + host, true
			}
		}
	}
	for name, vals := range req.Header {
		for _, v := range vals {
			if !strings.Contains(v, ph) {
				continue
			}
			if cr.Query != "" || cr.BasicUser != "" {
				return "header " + name, true
			}
			if name != cr.Header {
				return "header " + name, true
			}
			if !slices.Contains(cr.Hosts, host) {
				return "header " + name + " to host " + host, true
			}
			if _, ok := cr.put(v); !ok {
				return "header " + name + " in another shape than " + strconv.Quote(cr.Format), true
			}
		}
	}
	return "", false
}

// placeholderIn is the first credential whose placeholder req carries anywhere (for a request
// refused before it is read further).
func (c *Call) placeholderIn(req *http.Request) *Credential {
	var b bytes.Buffer
	_ = req.Header.Write(&b)
	s := b.String() + req.URL.String() + req.Host
	for i := range c.cfg.Creds {
		if strings.Contains(s, string(c.cfg.Creds[i].Placeholder)) {
			return &c.cfg.Creds[i]
		}
	}
	return nil
}

// respond writes resp to the tool with every credential's secret redacted from its headers and
// body (in any form the redactor knows), and returns the body bytes written.
func (c *Call) respond(conn net.Conn, req *http.Request, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	var lits []secrets.Literal
	for _, cr := range c.cfg.Creds {
		for _, f := range secrets.Forms(cr.Value) {
			lits = append(lits, secrets.Literal{Name: cr.Name, Form: f})
		}
	}
	for k, vals := range resp.Header {
		for i, v := range vals {
			if out, found := secrets.RedactString(v, lits); len(found) > 0 {
				vals[i] = out
				c.echoed(found, req, "response header "+k)
			}
		}
	}
	pr, pw := io.Pipe()
	var found []secrets.Literal
	var fmu sync.Mutex
	r := secrets.NewRedactor(pw, lits, nil, func(m secrets.Match) {
		fmu.Lock()
		found = append(found, secrets.Literal{Name: m.Name, Form: secrets.Form{Encoding: m.Encoding}})
		fmu.Unlock()
	})
	go func() {
		_, err := io.Copy(r, resp.Body)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
	}()
	counted := &countReader{r: pr}
	out := &http.Response{Status: resp.Status, StatusCode: resp.StatusCode, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: resp.Header, Body: io.NopCloser(counted), ContentLength: -1, Close: req.Close || resp.Close, Request: req}
	// the length may change with a redaction: chunked, unless there is no body
	out.Header.Del("Content-Length")
	out.TransferEncoding = []string{"chunked"}
	if req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200 {
		out.Body, out.ContentLength, out.TransferEncoding = http.NoBody, 0, nil
		if cl := resp.Header.Get("Content-Length"); cl != "" {
			out.Header.Set("Content-Length", cl)
		}
	}
	err := out.Write(conn)
	fmu.Lock()
	if len(found) > 0 {
		c.echoed(found, req, "response body")
	}
	fmu.Unlock()
	return counted.n, err
}

// echoed records a secret the server sent back, redacted before the tool saw it.
func (c *Call) echoed(found []secrets.Literal, req *http.Request, where string) {
	for _, f := range found {
		for _, cr := range c.cfg.Creds {
			if cr.Name != f.Name {
				continue
			}
			c.cfg.Emit(event.Event{Kind: event.KindCredential, Credential: &event.Credential{Name: cr.Name, Action: event.CredentialLeaked,
				Fingerprint: cr.Fingerprint, Result: "redacted", Where: where, Encoding: f.Encoding, Host: hostOnly(req.Host), Method: req.Method, Path: req.URL.Path}})
		}
	}
}

// alert raises an alert on the credential surface, once per rule and text.
func (c *Call) alert(rule, severity, text string) {
	c.mu.Lock()
	dup := c.seen[rule+text]
	c.seen[rule+text] = true
	c.mu.Unlock()
	if dup {
		return
	}
	c.cfg.Emit(event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: rule, Title: "berm's injecting egress refused a request",
		Severity: severity, Surface: event.SurfaceCredential, Output: text}})
}

func writeRefusal(w io.Writer, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, http.StatusText(status), len(body), body)
}

func drain(req *http.Request) {
	if req.Body != nil {
		_, _ = io.CopyN(io.Discard, req.Body, 64<<10)
	}
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
