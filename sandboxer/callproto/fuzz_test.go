package callproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The bytes a caller sends bermd after its magic byte: these fuzz tests are what a hostile
// front (any local root process that reaches bermd's socket) can write. `go test` replays
// the seeds and testdata/fuzz; `go test -fuzz FuzzX` searches (testenv/fuzz/README.md).

// FuzzReadInvocation: a bare invocation is refused with a wrapped, lowercase error or read
// exactly: what was read encodes (AppendInvocation, the C front's format) to the very bytes
// consumed, never more than its length prefix says, and nothing past them is touched.
func FuzzReadInvocation(f *testing.F) {
	le := binary.LittleEndian
	withLen := func(body []byte) []byte { return append(le.AppendUint32(nil, uint32(len(body))), body...) }
	for _, seed := range [][]byte{
		AppendInvocation(nil, nil, nil),
		AppendInvocation(nil, []string{"--tool", "t", "--", "/bin/true"}, []string{"PATH=/bin", "HOME=/root"}),
		AppendInvocation(nil, []string{"", "\xff\xfe", "a b\n"}, []string{"=", "X=", "NOEQUALS"}),
		AppendInvocation(nil, slices.Repeat([]string{"x"}, 100), slices.Repeat([]string{"E=1"}, 10)),
		le.AppendUint32(nil, MaxInvocation+1),
		le.AppendUint32(nil, 0xffffffff),
		withLen(nil),
		withLen(le.AppendUint32(nil, 1<<30)),
		withLen(append(le.AppendUint32(nil, 1), 'a')),
		withLen(append(le.AppendUint32(le.AppendUint32(nil, 0), 0), 'z')),
		append(AppendInvocation(nil, []string{"a"}, nil), `{"signal":"interrupt"}`+"\n"...),
		{},
		{1, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &countingReader{r: bytes.NewReader(b)}
		args, env, err := ReadInvocation(bufio.NewReaderSize(r, 16))
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "invocation") && !strings.HasPrefix(msg, "read invocation") {
				t.Fatalf("error %q does not say it is about the invocation", msg)
			}
			if args != nil || env != nil {
				t.Fatalf("error %v with %d args and %d env returned", err, len(args), len(env))
			}
			return
		}
		enc := AppendInvocation(nil, args, env)
		if len(enc) > len(b) || !bytes.Equal(enc, b[:len(enc)]) {
			t.Fatalf("read %q %q; they encode to %x, not the input's %x", args, env, enc, b)
		}
		// bufio reads ahead, but ReadInvocation asked for no more than the frame: the
		// counting reader saw at most the frame plus one buffer.
		if r.n > len(enc)+16 {
			t.Fatalf("read %d bytes for an invocation of %d", r.n, len(enc))
		}
		for _, s := range slices.Concat(args, env) {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("string %q holds a NUL", s)
			}
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzDecodeRequest: the JSON form (after 'R'), read as bermd reads it: one Request, then
// Interrupt lines until the connection ends. A request that decodes survives its own encoding
// unchanged (what bermd logs or forwards is what it judged); the interrupts that follow end
// with an error at the end of the bytes, never a loop.
func FuzzDecodeRequest(f *testing.F) {
	good, _ := json.Marshal(Request{CallID: "c1", Tool: "t", Tenant: "x", Argv: []string{"/bin/sh", "-c", "id"},
		Workspace: "/tmp/w", Env: []string{"PATH=/bin", "NOEQUALS", ""}, Explicit: []string{"wall"},
		PolicyFile: "/etc/p.yaml", Traced: []uint32{1, 2}, Terminal: &Terminal{Stdout: true}, DNSUpstream: "1.1.1.1:53"})
	for _, seed := range []string{
		string(good) + "\n",
		string(good) + "\n" + `{"signal":"interrupt"}` + "\n" + `{"signal":"terminated"}` + "\n",
		`{"argv":["\u0000","\ud800"],"env":["\xff"]}`,
		`{"limits":{"wall":"1s"}}`,
		`{"limits":{"wall":-1,"memory":1e400}}`,
		`{"traced":[4294967296]}`,
		`{"terminal":null}` + "\n" + `{"signal":1}`,
		`[` + strings.Repeat(`[`, 200),
		`{"call_id":"a","call_id":"b"}`,
		`   `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(b)))
		var req Request
		if err := dec.Decode(&req); err != nil {
			return
		}
		again, err := json.Marshal(&req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v", err)
		}
		var back Request
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("a request's own encoding does not decode: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normal(req), normal(back)) {
			t.Fatalf("request changed through its encoding:\n%+v\n%+v", req, back)
		}
		for i := 0; ; i++ {
			if i > len(b) {
				t.Fatalf("%d interrupts decoded from %d bytes", i, len(b))
			}
			var in Interrupt
			if err := dec.Decode(&in); err != nil {
				break // the end of the bytes, or bytes that are no interrupt: the call ends
			}
		}
	})
}

// normal makes nil and empty slices alike (omitempty drops an empty one).
func normal(r Request) Request {
	for _, s := range []*[]string{&r.Argv, &r.Env, &r.Explicit} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(r.Traced) == 0 {
		r.Traced = nil
	}
	return r
}
