package inject

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decoded gives resp's body as identity, whatever Content-Encoding (gzip, deflate, a list of
// them) the server used although the egress asked for none: an encoded body cannot be
// redacted. Content-Encoding and Content-Length go (the body the tool gets is identity, its
// length set by the relay). An encoding berm cannot read is an error: the response is not
// passed on, rather than passed on unredacted.
func decoded(resp *http.Response) error {
	ce := resp.Header.Values("Content-Encoding")
	if len(ce) == 0 {
		return nil
	}
	if resp.ContentLength == 0 {
		resp.Header.Del("Content-Encoding")
		return nil
	}
	var codings []string
	for _, v := range ce {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	for _, c := range codings {
		switch c {
		case "gzip", "x-gzip", "deflate":
		default:
			return fmt.Errorf("content encoding %q cannot be read to redact the response", c)
		}
	}
	body := io.ReadCloser(resp.Body)
	closer := resp.Body
	// the last coding applied is the first undone
	for i := len(codings) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch codings[i] {
		case "gzip", "x-gzip":
			r, err = gzip.NewReader(body)
		case "deflate":
			r, err = inflate(body)
		}
		if errors.Is(err, io.EOF) { // no body at all
			r, err = strings.NewReader(""), nil
		}
		if err != nil {
			return fmt.Errorf("content encoding %s: %w", codings[i], err)
		}
		body = struct {
			io.Reader
			io.Closer
		}{r, closer}
	}
	resp.Body = body
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return nil
}

// inflate reads HTTP's deflate: zlib (RFC 1950) as the RFC has it, or the raw deflate (RFC
// 1951) some servers send instead.
func inflate(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	h, err := br.Peek(2)
	if err != nil {
		return nil, err
	}
	if h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
		return zlib.NewReader(br)
	}
	return flate.NewReader(br), nil
}
