package mcpserve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// stdioPeer is an MCP server process driven over stdio with raw JSON-RPC lines (no client
// library in the measured path).
type stdioPeer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

func startPeer(b *testing.B, argv ...string) *stdioPeer {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &stdioPeer{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	p.request(b, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}`)
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return p
}

// request sends one request and reads lines up to its answer.
func (p *stdioPeer) request(b *testing.B, method, params string) json.RawMessage {
	p.id++
	fmt.Fprintf(p.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", p.id, method, params)
	for {
		line, err := p.out.ReadBytes('\n')
		if err != nil {
			b.Fatalf("%s: %v", method, err)
		}
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &m) == nil && m.ID == p.id {
			if len(m.Error) > 0 {
				b.Fatalf("%s: %s", method, m.Error)
			}
			return m.Result
		}
	}
}

// BenchmarkMCP: a tools/call round trip through berm mcp serve against the same command by
// berm run (both through one bermd), and a tools/call of the reference filesystem server
// behind berm mcp proxy against the bare server, in the same run. ns/op is one tools/call
// (or one berm run).
func BenchmarkMCP(b *testing.B) {
	node := nodeDir(b)
	d := startDaemon(b)
	full := bermbin.Path(b, "berm-full")
	front := bermbin.Path(b, "berm")
	b.Run("run-true/berm-run", func(b *testing.B) {
		for b.Loop() {
			out, err := exec.Command(front, "run", "--socket", d.socket, "--daemon", "required", "--", "/bin/sh", "-c", "true").CombinedOutput()
			if err != nil {
				b.Fatalf("berm run: %v %s", err, out)
			}
		}
	})
	b.Run("run-true/mcp-serve", func(b *testing.B) {
		p := startPeer(b, full, "mcp", "serve", "--socket", d.socket, "--daemon", "required")
		for b.Loop() {
			if r := p.request(b, "tools/call", `{"name":"run","arguments":{"command":"true"}}`); strings.Contains(string(r), `"isError":true`) {
				b.Fatalf("tools/call: %s", r)
			}
		}
	})
	server := filepath.Join(node, "node_modules", ".bin", "mcp-server-filesystem")
	read := `{"name":"read_text_file","arguments":{"path":"/etc/hostname"}}`
	b.Run("filesystem-read/bare", func(b *testing.B) {
		p := startPeer(b, server, "/")
		for b.Loop() {
			p.request(b, "tools/call", read)
		}
	})
	b.Run("filesystem-read/proxy", func(b *testing.B) {
		p := startPeer(b, full, "mcp", "proxy", "--socket", d.socket, "--daemon", "required", "--", server, "/")
		for b.Loop() {
			if r := p.request(b, "tools/call", read); strings.Contains(string(r), `"isError":true`) {
				b.Fatalf("tools/call: %s", r)
			}
		}
	})
}
