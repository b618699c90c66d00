package inject

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request framing, read strictly. The egress re-serializes every request it relays, so the
// server parses what the egress parsed; but a request whose framing two parsers could read
// two ways (Content-Length and Transfer-Encoding together, two Content-Lengths, an obfuscated
// Transfer-Encoding, a folded or bare-LF line) is refused rather than guessed at: whatever the
// tool meant, berm does not put the secret into a request it had to guess the end of.

const (
	maxHead     = 64 << 10 // a request's line and headers
	maxDrain    = 64 << 10 // unread body the egress reads past to keep a connection
	h2Preface   = "PRI * HTTP/2.0\r\n"
	errStatusHd = http.StatusRequestHeaderFieldsTooLarge
)

// errPrior is a connection that opened with HTTP/2's preface (prior knowledge, h2c).
var errPrior = errors.New("HTTP/2 with prior knowledge (the connection preface): only HTTP/1.1 is relayed")

// frameError is a request the egress will not read: its status and why.
type frameError struct {
	status int
	why    string
}

func (e *frameError) Error() string { return e.why }

func badFrame(format string, a ...any) error {
	return &frameError{status: http.StatusBadRequest, why: fmt.Sprintf(format, a...)}
}

// readHead reads one request's line and headers, raw (through the empty line). io.EOF: the
// connection ended cleanly between requests.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(head)+len(line) > maxHead {
			return nil, &frameError{status: errStatusHd, why: fmt.Sprintf("request head past %d bytes", maxHead)}
		}
		head = append(head, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(head) == 0 && errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			if len(head) == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("request head cut short: %w", err)
		}
		if string(head) == h2Preface {
			return nil, errPrior
		}
		if bytes.HasSuffix(head, []byte("\r\n\r\n")) || bytes.Equal(head, []byte("\r\n")) || bytes.HasSuffix(head, []byte("\n\n")) {
			return head, nil
		}
		if bytes.Equal(head, []byte("\n")) {
			return head, nil // checked (and refused) by checkHead
		}
	}
}

// framing is how a request's body ends, as checkHead read it.
type framing struct {
	chunked bool
	length  int64 // -1: no Content-Length
}

// checkHead refuses a head any two HTTP parsers might read differently, and says how its body
// is framed.
func checkHead(head []byte) (framing, error) {
	f := framing{length: -1}
	lines := strings.SplitAfter(string(head), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, "\r\n") {
			return f, badFrame("line %d ends in a bare LF", i+1)
		}
		if strings.ContainsAny(l[:len(l)-2], "\r\n\x00") {
			return f, badFrame("line %d holds a bare CR or NUL", i+1)
		}
	}
	if len(lines) < 2 || lines[len(lines)-1] != "\r\n" {
		return f, badFrame("no request line")
	}
	parts := strings.Split(strings.TrimSuffix(lines[0], "\r\n"), " ")
	if len(parts) != 3 || !isToken(parts[0]) || parts[1] == "" || strings.ContainsFunc(parts[1], isCTLorSpace) {
		return f, badFrame("malformed request line %q", lines[0])
	}
	switch parts[2] {
	case "HTTP/1.1", "HTTP/1.0":
	default:
		return f, &frameError{status: http.StatusHTTPVersionNotSupported, why: fmt.Sprintf("protocol %q: only HTTP/1.x is relayed", parts[2])}
	}
	for _, l := range lines[1 : len(lines)-1] {
		if l[0] == ' ' || l[0] == '\t' {
			return f, badFrame("a header line folded onto the next (obs-fold)")
		}
	}
	var te, cl int
	for _, l := range lines[1 : len(lines)-1] {
		l = strings.TrimSuffix(l, "\r\n")
		name, raw, ok := strings.Cut(l, ":")
		if !ok || !isToken(name) {
			return f, badFrame("malformed header line %q", l)
		}
		value := strings.Trim(raw, " \t")
		if strings.ContainsFunc(value, func(r rune) bool { return r != '\t' && isCTLorSpace(r) && r != ' ' }) {
			return f, badFrame("header %s holds a control character", name)
		}
		// The framing headers take one exact shape: a space at most before the value, nothing
		// after it, no tab.
		exact := strings.TrimPrefix(raw, " ")
		switch {
		case strings.EqualFold(name, "Transfer-Encoding"):
			te++
			if !strings.EqualFold(exact, "chunked") {
				return f, badFrame("Transfer-Encoding %q: only a lone \"chunked\" is read", raw)
			}
			f.chunked = true
		case strings.EqualFold(name, "Content-Length"):
			cl++
			n, err := strconv.ParseInt(exact, 10, 64)
			if err != nil || n < 0 || exact == "" || strings.ContainsFunc(exact, func(r rune) bool { return r < '0' || r > '9' }) {
				return f, badFrame("Content-Length %q", raw)
			}
			f.length = n
		}
	}
	switch {
	case te > 1:
		return f, badFrame("%d Transfer-Encoding headers", te)
	case cl > 1:
		return f, badFrame("%d Content-Length headers", cl)
	case te > 0 && cl > 0:
		return f, badFrame("both Content-Length and Transfer-Encoding")
	case te > 0 && parts[2] == "HTTP/1.0":
		return f, badFrame("Transfer-Encoding in an HTTP/1.0 request")
	}
	return f, nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

func isCTLorSpace(r rune) bool { return r <= ' ' || r == 0x7f }

// readRequest reads the next request of the connection: its head checked, its body framed as
// checkHead says and read from br only as the relay asks (reqBody).
func readRequest(br *bufio.Reader, conn net.Conn, headWait, bodyIdle time.Duration) (*http.Request, *reqBody, error) {
	_ = conn.SetReadDeadline(time.Now().Add(headWait))
	head, err := readHead(br)
	if err != nil {
		return nil, nil, err
	}
	f, err := checkHead(head)
	if err != nil {
		return nil, nil, err
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, nil, badFrame("%v", err)
	}
	body := &reqBody{conn: conn, idle: bodyIdle}
	switch {
	case f.chunked:
		body.r = &chunked{cr: httputil.NewChunkedReader(br), br: br}
	case f.length > 0:
		body.r = io.LimitReader(br, f.length)
	default:
		body.r = eofReader{}
	}
	if f.chunked || f.length > 0 {
		req.Body = body
	} else {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	return req, body, nil
}

// reqBody is a request's body as the tool frames it; the relay's transport reads it, and the
// relay finishes it before the next request is read, so no byte of a body is read as a
// request and no request is read while the body is still being read.
type reqBody struct {
	mu   sync.Mutex
	r    io.Reader
	conn net.Conn
	idle time.Duration
	done bool
	eof  bool
}

var errBodyDone = errors.New("request body closed")

func (b *reqBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errBodyDone
	}
	if b.eof {
		return 0, io.EOF
	}
	_ = b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
	return nil
}

// finish ends the body for the relay: what the transport left unread is read past (up to
// maxDrain); false: the body did not end cleanly, and neither does the connection.
func (b *reqBody) finish() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if b.eof {
		return true
	}
	_ = b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := io.Copy(io.Discard, io.LimitReader(b.r, maxDrain+1))
	b.eof = err == nil && n <= maxDrain
	return b.eof
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// chunked is a chunked body read to its end: the last chunk and then its trailer section,
// whose lines must end in CRLF (trailers are not passed on).
type chunked struct {
	cr  io.Reader
	br  *bufio.Reader
	end bool
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.end {
		return 0, io.EOF
	}
	n, err := c.cr.Read(p)
	if !errors.Is(err, io.EOF) {
		return n, err
	}
	for total := 0; ; {
		line, err := c.br.ReadSlice('\n')
		total += len(line)
		if err != nil || total > maxHead || !bytes.HasSuffix(line, []byte("\r\n")) {
			return n, badFrame("malformed chunked trailer")
		}
		if len(line) == 2 {
			c.end = true
			return n, io.EOF
		}
	}
}
