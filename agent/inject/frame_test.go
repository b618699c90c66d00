package inject

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Each framing two HTTP parsers could read two ways is refused; the plain shapes real clients
// send are read, their body framed as they say.
func TestCheckHeadRefusesFramingTwoParsersCouldReadTwoWays(t *testing.T) {
	const h = "POST /x HTTP/1.1\r\nHost: api.test\r\n"
	for _, tc := range []struct {
		name, head string
		status     int // 0: read
		chunked    bool
		length     int64
	}{
		{"a request without a body is read", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0, false, -1},
		{"a Content-Length is read", h + "Content-Length: 5\r\n\r\n", 0, false, 5},
		{"a Content-Length without a space is read", h + "Content-Length:5\r\n\r\n", 0, false, 5},
		{"chunked is read, in any case", h + "Transfer-Encoding: Chunked\r\n\r\n", 0, true, -1},
		{"HTTP/1.0 is read", "GET / HTTP/1.0\r\n\r\n", 0, false, -1},
		{"Content-Length and Transfer-Encoding together are refused", h + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400, false, 0},
		{"two differing Content-Lengths are refused", h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400, false, 0},
		{"two equal Content-Lengths are refused", h + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", 400, false, 0},
		{"a Content-Length list is refused", h + "Content-Length: 5, 5\r\n\r\n", 400, false, 0},
		{"a signed Content-Length is refused", h + "Content-Length: +5\r\n\r\n", 400, false, 0},
		{"chunked with a trailing space is refused", h + "Transfer-Encoding: chunked \r\n\r\n", 400, false, 0},
		{"xchunked is refused", h + "Transfer-Encoding: xchunked\r\n\r\n", 400, false, 0},
		{"a list of codings is refused", h + "Transfer-Encoding: chunked, identity\r\n\r\n", 400, false, 0},
		{"a tab before chunked is refused", h + "Transfer-Encoding:\tchunked\r\n\r\n", 400, false, 0},
		{"a tab before the colon is refused", h + "Transfer-Encoding\t: chunked\r\n\r\n", 400, false, 0},
		{"a space before the colon is refused", h + "Content-Length : 5\r\n\r\n", 400, false, 0},
		{"a folded line is refused", h + "Transfer-Encoding:\r\n chunked\r\n\r\n", 400, false, 0},
		{"two Transfer-Encodings are refused", h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, false, 0},
		{"a bare LF ending the request line is refused", "POST /x HTTP/1.1\nHost: a\r\nContent-Length: 5\r\n\r\n", 400, false, 0},
		{"a bare LF ending a header is refused", h + "Content-Length: 5\n\r\n", 400, false, 0},
		{"a bare CR in a header is refused", h + "X-A: a\rb\r\n\r\n", 400, false, 0},
		{"an extra space in the request line is refused", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, false, 0},
		{"Transfer-Encoding in HTTP/1.0 is refused", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, false, 0},
		{"HTTP/2.0 in a request line is refused", "GET / HTTP/2.0\r\n\r\n", 505, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := checkHead([]byte(tc.head))
			var fe *frameError
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.status == 0 && (f.chunked != tc.chunked || f.length != tc.length):
				t.Errorf("framing %+v, want chunked %v length %d", f, tc.chunked, tc.length)
			case tc.status != 0 && !errors.As(err, &fe):
				t.Fatalf("read (%+v), want refused %d", f, tc.status)
			case tc.status != 0 && fe.status != tc.status:
				t.Errorf("refused %d (%v), want %d", fe.status, err, tc.status)
			}
		})
	}
}

// HTTP/2's connection preface is told apart from a request at its first line.
func TestReadHeadTellsHTTP2sPrefaceApart(t *testing.T) {
	_, err := readHead(bufio.NewReader(strings.NewReader("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")))
	if !errors.Is(err, errPrior) {
		t.Errorf("%v, want the preface refused", err)
	}
}

// A body compressed although identity was asked for is read as identity; an encoding berm
// cannot read is an error, not passed on.
func TestDecodedReadsGzipAndRefusesOtherEncodings(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte("the secret"))
	zw.Close()
	resp := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}, "Content-Length": {"40"}}, ContentLength: int64(z.Len()), Body: io.NopCloser(&z)}
	if err := decoded(resp); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if string(b) != "the secret" || err != nil || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != "" {
		t.Errorf("body %q (%v), headers %v", b, err, resp.Header)
	}
	for _, ce := range []string{"br", "zstd", "gzip, br", "compress"} {
		resp := &http.Response{Header: http.Header{"Content-Encoding": {ce}}, ContentLength: -1, Body: io.NopCloser(strings.NewReader("x"))}
		if err := decoded(resp); err == nil {
			t.Errorf("%s: read, want refused", ce)
		}
	}
}
