package sandboxer_test

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// protoEnv is api.test behind real servers that record every byte they are sent (plaintext,
// after TLS): on 443 (TLS), 80, and 8443 and 8444 (plain, ports the credential's rule does
// not name). /check wants the secret; /gzip, /deflate and /br answer with what they got in
// Authorization, compressed whether or not the client asked.
type protoEnv struct {
	secret string
	ip     string
	caPEM  string
	up     *dnstest.Server

	mu         sync.Mutex
	raw        bytes.Buffer // every byte the servers read
	paths      []string     // every request the servers parsed: "METHOD /path authorized?"
	authorized int
}

func startProtoEnv(t *testing.T) *protoEnv {
	t.Helper()
	b := make([]byte, 16)
	rand.Read(b)
	e := &protoEnv{secret: "sk-live-" + hex.EncodeToString(b), ip: testAddr(t, 30)}
	ca := tlstest.NewCA(t, "upstream protocol test root")
	e.caPEM = ca.PEMPath
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		ok := auth == "Bearer "+e.secret
		e.mu.Lock()
		e.paths = append(e.paths, fmt.Sprintf("%s %s %v", r.Method, r.URL.Path, ok))
		if ok {
			e.authorized++
		}
		e.mu.Unlock()
		echo := []byte("you sent " + auth)
		switch r.URL.Path {
		case "/check":
			if !ok {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			fmt.Fprint(w, "authorized")
		case "/gzip":
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			zw.Write(echo)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(z.Bytes())
		case "/deflate": // raw deflate, as some servers send it
			var z bytes.Buffer
			zw, _ := flate.NewWriter(&z, 5)
			zw.Write(echo)
			zw.Close()
			w.Header().Set("Content-Encoding", "deflate")
			w.Write(z.Bytes())
		case "/br": // an encoding berm cannot read: here the echo itself, labelled br
			w.Header().Set("Content-Encoding", "br")
			w.Write(echo)
		default:
			n, _ := bytes.NewBuffer(nil).ReadFrom(r.Body)
			fmt.Fprintf(w, "read %d body bytes", n)
		}
	})
	cert := ca.Leaf(t, "api.test")
	e.serve(t, "443", &tls.Config{Certificates: []tls.Certificate{cert}}, h)
	for _, p := range []string{"80", "8443", "8444"} {
		e.serve(t, p, nil, h)
	}
	e.up = dnstest.Start(t, dnstest.Zone{"api.test": {dnstest.A("api.test", e.ip, 60)}})
	return e
}

// serve runs h on port, over TLS with cfg (nil: plain), recording what each connection reads.
func (e *protoEnv) serve(t *testing.T, port string, cfg *tls.Config, h http.Handler) {
	ln, err := net.Listen("tcp", net.JoinHostPort(e.ip, port))
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(recordingListener{ln, e})
	t.Cleanup(func() { srv.Close() })
}

type recordingListener struct {
	net.Listener
	e *protoEnv
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return recordingConn{c, l.e}, nil
}

type recordingConn struct {
	net.Conn
	e *protoEnv
}

func (c recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.e.mu.Lock()
	c.e.raw.Write(p[:n])
	c.e.mu.Unlock()
	return n, err
}

// run runs script as a call holding the injected credential api (api.test), with extra
// egress rules (YAML list items).
func (e *protoEnv) run(t *testing.T, state, callID, egress, script string) (map[string]string, bermbin.Result) {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "proto.yaml")
	if egress == "" {
		egress = "[]"
	}
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-protocol-test}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  network:
    egress: `+egress+`
  credentials:
    - name: api
      source: {env: INJECT_TEST_SECRET}
      deliver: {env: API_TOKEN, inject: {hosts: [api.test], allowPrivate: true}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := bermbin.Berm(t, []string{"INJECT_TEST_SECRET=" + e.secret, "BERM_INJECT_UPSTREAM_CA=" + e.caPEM},
		"run", "--state-dir", state, "--no-rules", "--call-id", callID, "--workspace", bermbin.Workspace(t), "--policy", pol,
		"--dns-upstream", e.up.Addr, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	if strings.Contains(r.Stdout+r.Stderr, e.secret) {
		t.Errorf("the secret reached the caller: %q", r.Stdout)
	}
	assertAbsent(t, state, e.secret)
	return got, r
}

// credEvents are the call's credential events of action, as "host method path status result".
func credEvents(t *testing.T, state, callID, action string) []string {
	t.Helper()
	var out []string
	for _, ev := range bermbin.Timeline(t, state, callID).Events {
		if c := ev.Credential; ev.Kind == event.KindCredential && c != nil && c.Action == action {
			out = append(out, fmt.Sprintf("%s %s %s %d %s (%s)", c.Host, c.Method, c.Path, c.Status, c.Result, c.Name))
		}
	}
	return out
}

func wantResults(t *testing.T, got, want map[string]string, r bermbin.Result) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q (stdout %q, stderr %q)", k, got[k], w, r.Stdout, r.Stderr)
		}
	}
}

// wantEvents fails unless each of want is in a line of events.
func wantEvents(t *testing.T, what string, events []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, w) }) {
			t.Errorf("no %s credential event with %q in %q", what, w, events)
		}
	}
}

// HTTP/2: a client offering h2 over TLS (ALPN) is answered in HTTP/1.1 and gets the secret
// injected; HTTP/2 with prior knowledge on port 80 and an Upgrade to h2c are refused before
// anything goes upstream, each a refused credential event.
func TestInjectingEgressSpeaksHTTP1AndRefusesHTTP2WithoutALPN(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startProtoEnv(t)
	state := t.TempDir()
	script := `
echo "h2tls $(curl -sS --max-time 20 --http2 -w ' %{http_version}' -H "Authorization: Bearer $API_TOKEN" https://api.test/check)"
echo "h2prior $(curl -sS --max-time 20 --http2-prior-knowledge -H "Authorization: Bearer $API_TOKEN" http://api.test/check >/dev/null 2>&1; echo $?)"
echo "h2c $(curl -sS --max-time 20 --http2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $API_TOKEN" http://api.test/check)"
`
	got, r := e.run(t, state, "inject-http2", "", script)
	wantResults(t, got, map[string]string{"h2tls": "authorized 1.1", "h2c": "501"}, r)
	if got["h2prior"] == "0" || got["h2prior"] == "" {
		t.Errorf("curl --http2-prior-knowledge: exit %q, want a failure", got["h2prior"])
	}
	e.mu.Lock()
	if e.authorized != 1 {
		t.Errorf("api.test authorized %d requests (%q), want 1: the h2 over TLS one", e.authorized, e.paths)
	}
	e.mu.Unlock()
	wantEvents(t, "injected", credEvents(t, state, "inject-http2", event.CredentialInjected), "api.test GET /check 200")
	wantEvents(t, "refused", credEvents(t, state, "inject-http2", event.CredentialRefused), "505 HTTP/2 with prior knowledge", "api.test GET /check 501 Upgrade \"h2c\"")
}

// Request smuggling, from a raw TLS socket (python's ssl module) inside the call: every
// framing two parsers could read two ways is refused (400) with a refused event, and nothing
// of it reaches the server; a request inside another's body stays that body.
func TestInjectingEgressRefusesAmbiguousFraming(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startProtoEnv(t)
	state := t.TempDir()
	script := `timeout 120 python3 - <<'EOF'
import os, re, socket, ssl
ph = os.environ["API_TOKEN"]
auth = "Authorization: Bearer " + ph + "\r\n"
inner = "GET /inner HTTP/1.1\r\nHost: api.test\r\n" + auth + "\r\n"
forms = {
    "good": "GET /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Connection: close\r\n\r\n",
    "clte": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + inner,
    "twocl": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % len(inner) + inner,
    "tespace": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Transfer-Encoding: chunked \r\n\r\n0\r\n\r\n" + inner,
    "tex": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n" + inner,
    "telist": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + inner,
    "tetab": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n" + inner,
    "tenametab": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n" + inner,
    "tefold": "POST /check HTTP/1.1\r\nHost: api.test\r\n" + auth + "X-Pad: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + inner,
    "barelf": "POST /check HTTP/1.1\nHost: api.test\r\n" + auth + "Content-Length: 0\r\n\r\n" + inner,
    "lfheader": "GET /check HTTP/1.1\r\nHost: api.test\n" + auth + "\r\n",
    "inbody": "POST /outer HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(inner) + inner,
}
ctx = ssl.create_default_context()
for name, req in forms.items():
    s = ctx.wrap_socket(socket.create_connection(("api.test", 443), timeout=20), server_hostname="api.test")
    s.sendall(req.encode())
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError, ssl.SSLError):
        pass
    s.close()
    status = data.split(b" ")[1].decode() if data.startswith(b"HTTP/1.1 ") else "none"
    head, _, body = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        out = b""
        while body:
            size, _, body = body.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out, body = out + body[:n], body[n + 2:]
        body = out
    m = re.search(rb"read \d+ body bytes", body)
    print(name, status, m.group(0).decode() if m else "-")
EOF
`
	got, r := e.run(t, state, "inject-framing", "", script)
	status := map[string]string{}
	for k, v := range got {
		status[k], _, _ = strings.Cut(v, " ")
	}
	// inbody: a request pipelined inside a body is never judged as a request; its placeholder
	// makes the outer request's body refused (403) before it reaches the server
	want := map[string]string{"good": "200", "inbody": "403"}
	for _, f := range []string{"clte", "twocl", "tespace", "tex", "telist", "tetab", "tenametab", "tefold", "barelf", "lfheader"} {
		want[f] = "400"
	}
	wantResults(t, status, want, r)
	e.mu.Lock()
	raw, paths := e.raw.String(), slices.Clone(e.paths)
	e.mu.Unlock()
	if n := strings.Count(raw, e.secret); n != 1 {
		t.Errorf("the servers read the secret %d times, want once (the good request): %q", n, raw)
	}
	// the outer request's head went before its body was read (the server sees it cut short);
	// the inner one is never a request
	if !slices.Equal(paths, []string{"GET /check true", "POST /outer false"}) && !slices.Equal(paths, []string{"POST /outer false", "GET /check true"}) {
		t.Errorf("the servers parsed %q, want the good request and the outer one only", paths)
	}
	refused := credEvents(t, state, "inject-framing", event.CredentialRefused)
	if len(refused) != 11 {
		t.Errorf("%d refused credential events, want one per ambiguous request (10) and the body's placeholder: %q", len(refused), refused)
	}
	wantEvents(t, "refused", refused, "400 ambiguous or malformed request: both Content-Length and Transfer-Encoding", "2 Content-Length headers", "bare LF", "obs-fold", "POST /outer 403 the placeholder of credential api (raw) in the request's body")
}

// CONNECT to an IP address is refused with a refused event; the credential host on a port the
// kernel does not move to the injecting egress (8443, 8444) never gets the secret: when an
// egress rule opens that port the connection goes through the inspecting relay, which cuts the
// placeholder (403), and otherwise it is refused.
func TestInjectingEgressRefusesCONNECTAndLeavesOtherPortsWithoutTheSecret(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startProtoEnv(t)
	state := t.TempDir()
	script := `
echo "connect80 $(curl -sS --max-time 20 -o /dev/null -w '%{http_connect}' --proxytunnel -x http://api.test:80 https://10.1.2.3/ 2>/dev/null)"
echo "connecttls $(timeout 30 python3 -c '
import os, socket, ssl
s = ssl.create_default_context().wrap_socket(socket.create_connection(("api.test", 443), timeout=20), server_hostname="api.test")
s.sendall(("CONNECT 10.1.2.3:443 HTTP/1.1\r\nHost: 10.1.2.3:443\r\nProxy-Authorization: Bearer " + os.environ["API_TOKEN"] + "\r\n\r\n").encode())
print(s.recv(4096).decode().split(" ")[1])')"
echo "port8443 $(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $API_TOKEN" http://api.test:8443/check)"
echo "port8444 $(curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" http://api.test:8444/check >/dev/null 2>&1; echo $?)"
`
	got, r := e.run(t, state, "inject-connect", "[{domain: api.test, ports: [8443], allowPrivate: true}]", script)
	wantResults(t, got, map[string]string{
		"connect80":  "405",
		"connecttls": "405",
		"port8443":   "403", // the relay cut the placeholder
		"port8444":   "7",   // no rule opens it
	}, r)
	e.mu.Lock()
	raw, authorized := e.raw.String(), e.authorized
	e.mu.Unlock()
	if authorized != 0 || strings.Contains(raw, e.secret) {
		t.Errorf("the servers got the secret (%d authorized): %q", authorized, raw)
	}
	refused := credEvents(t, state, "inject-connect", event.CredentialRefused)
	if len(refused) != 3 {
		t.Errorf("%d refused credential events, want one per CONNECT (2) and the relay's cut: %q", len(refused), refused)
	}
	wantEvents(t, "refused", refused, "10.1.2.3 CONNECT  405 CONNECT 10.1.2.3:443", ":8443   403 the placeholder of credential api (raw) sent over TCP")
}

// A server that compresses its answer although berm asked for identity: gzip and deflate are
// read, the secret it echoes redacted, and the tool gets identity; an encoding berm cannot
// read is refused (502) rather than passed on unredacted.
func TestInjectingEgressRedactsCompressedEchoesAndRefusesUnreadableEncodings(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startProtoEnv(t)
	state := t.TempDir()
	a := `-H "Authorization: Bearer $API_TOKEN"`
	script := fmt.Sprintf(`
echo "gzip $(curl -sS --max-time 20 %[1]s https://api.test/gzip)"
echo "gzipcompressed $(curl -sS --max-time 20 --compressed %[1]s https://api.test/gzip)"
echo "deflate $(curl -sS --max-time 20 %[1]s http://api.test/deflate)"
echo "python $(timeout 20 python3 -c 'import os,urllib.request as u; print(u.urlopen(u.Request("https://api.test/gzip", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]})).read().decode())' 2>&1 | tail -1)"
echo "node $(timeout 20 node -e 'fetch("https://api.test/gzip",{headers:{Authorization:"Bearer "+process.env.API_TOKEN}}).then(r=>r.text()).then(t=>console.log(t)).catch(e=>console.log("error "+e.cause))' 2>&1)"
echo "br $(curl -sS --max-time 20 -o /dev/null -w '%%{http_code}' %[1]s https://api.test/br)"
`, a)
	got, r := e.run(t, state, "inject-compressed", "", script)
	redacted := "you sent Bearer [berm:redacted:api]"
	wantResults(t, got, map[string]string{"gzip": redacted, "gzipcompressed": redacted, "deflate": redacted, "python": redacted, "node": redacted, "br": "502"}, r)
	leaked := credEvents(t, state, "inject-compressed", event.CredentialLeaked)
	if len(leaked) < 5 {
		t.Errorf("%d leaked (redacted) events, want one per echo (5): %q", len(leaked), leaked)
	}
	wantEvents(t, "refused", credEvents(t, state, "inject-compressed", event.CredentialRefused), "api.test GET /br 502 response refused: content encoding \"br\"")
	wantEvents(t, "injected", credEvents(t, state, "inject-compressed", event.CredentialInjected), "api.test GET /gzip 200", "api.test GET /br 502")
}
