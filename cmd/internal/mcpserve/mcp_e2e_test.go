package mcpserve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
)

// nodeDir installs the test's npm packages (the official MCP TypeScript SDK, the reference
// filesystem server) into testdata/node with npm, and returns that directory. Offline, the
// test is skipped, saying why; under CI it fails.
func nodeDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("testdata/node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		need(t, "npm is not installed: %v", err)
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--cache", "/var/cache/berm/npm-cache")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		need(t, "npm install (offline?): %v\n%s", err, out)
	}
	return dir
}

func need(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// bermd is a bermd started for one test, with its own state and socket.
type bermd struct {
	*bermbin.Daemon
	state, socket string
}

func startDaemon(t testing.TB) *bermd {
	t.Helper()
	b := bermbin.StartDaemon(t, "--no-rules")
	return &bermd{Daemon: b, state: b.State, socket: b.Socket}
}

// noCallLeft checks that every call bermd began has its record and no call's cgroup is left.
func (d *bermd) noCallLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		open := 0
		for _, c := range bermbin.Calls(t, d.state) {
			if c.Record == nil {
				open++
			}
		}
		left, _ := filepath.Glob("/sys/fs/cgroup/berm/*/call-*")
		if open == 0 && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls without a record, cgroups left: %v", open, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// toolResult is a CallToolResult as the TypeScript client returned it.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Error             string         `json:"error"`
}

func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
		b.WriteString("\n")
	}
	return b.String()
}

type clientOut struct {
	Tools        []string     `json:"tools"`
	Results      []toolResult `json:"results"`
	ConnectError string       `json:"connectError"`
}

type toolCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// tsClient runs the TypeScript SDK's client with a spec (client.mjs).
func tsClient(t *testing.T, node string, spec map[string]any) clientOut {
	t.Helper()
	b, _ := json.Marshal(spec)
	cmd := exec.Command("node", filepath.Join(node, "client.mjs"), string(b))
	cmd.Dir = node
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, stderr.String())
	}
	var o clientOut
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatalf("client output: %v\n%s\n%s", err, out, stderr.String())
	}
	if o.ConnectError != "" {
		t.Fatalf("client: %s\n%s", o.ConnectError, stderr.String())
	}
	t.Logf("client stderr:\n%s", stderr.String())
	return o
}

// A tools/call's _meta.traceparent (W3C trace context, as MCP clients propagate it) is the
// call's: its record carries it and its OpenTelemetry span is the client's span's child. One
// not in W3C's format is ignored (the call starts a trace of its own), never an error.
func TestServeTakesTheTraceContextFromTheRequestsMeta(t *testing.T) {
	node := nodeDir(t)
	d := startDaemon(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	o := tsClient(t, node, map[string]any{
		"stdio": map[string]any{"command": bermbin.Path(t, "berm-full"), "args": []string{"mcp", "serve", "--socket", d.socket, "--daemon", "required"}},
		"calls": []map[string]any{
			{"name": "run", "arguments": map[string]any{"command": "true"}, "_meta": map[string]any{"traceparent": tp}},
			{"name": "run", "arguments": map[string]any{"command": "true"}, "_meta": map[string]any{"traceparent": "00-not-a-trace-01"}},
			{"name": "run", "arguments": map[string]any{"command": "true"}},
		},
	})
	if len(o.Results) != 3 {
		t.Fatalf("results: %+v", o.Results)
	}
	for i, want := range []string{tp, "", ""} {
		r := o.Results[i]
		if r.IsError {
			t.Fatalf("call %d: a tool error: %+v", i, r)
		}
		if got := d.Call(t, r.StructuredContent["call_id"].(string)).Start.TraceParent; got != want {
			t.Errorf("call %d: the record's traceparent %q, want %q", i, got, want)
		}
	}
}

// berm mcp serve, driven by the official TypeScript client: each tools/call is a berm call
// through bermd whose output, end and denials come back, and whose record names the MCP
// session and request.
func TestServeRunsEachToolCallAsABermCall(t *testing.T) {
	node := nodeDir(t)
	d := startDaemon(t)
	full := bermbin.Path(t, "berm-full")
	o := tsClient(t, node, map[string]any{
		"stdio": map[string]any{"command": full, "args": []string{"mcp", "serve", "--socket", d.socket, "--daemon", "required"}},
		"calls": []toolCall{
			{"run", map[string]any{"command": "echo hello from $BERM_TOOL; echo to-stderr >&2"}},
			{"run", map[string]any{"command": "cat /etc/shadow"}},
			{"run", map[string]any{"command": "read x; echo got $x; exit 3", "stdin": "abc\n"}},
			{"run", map[string]any{"command": "sleep 30", "timeout": 1}},
		},
	})
	if strings.Join(o.Tools, ",") != "run" {
		t.Fatalf("tools: %v", o.Tools)
	}
	ok, shadow, exit3, slow := o.Results[0], o.Results[1], o.Results[2], o.Results[3]
	if ok.IsError || !strings.Contains(ok.text(), "hello from mcp-run") || !strings.Contains(ok.text(), "stderr:\nto-stderr") {
		t.Errorf("echo: %+v", ok)
	}
	if ok.StructuredContent["end_reason"] != "exit" || ok.StructuredContent["exit_status"] != 0.0 || ok.StructuredContent["complete"] != true {
		t.Errorf("echo's structured content: %v", ok.StructuredContent)
	}
	if !shadow.IsError || shadow.StructuredContent["denial_count"].(float64) < 1 {
		t.Errorf("cat /etc/shadow: not a tool error with a denial: %+v", shadow)
	}
	if !exit3.IsError || exit3.StructuredContent["exit_status"] != 3.0 || !strings.Contains(exit3.text(), "got abc") {
		t.Errorf("exit 3: %+v", exit3)
	}
	if !slow.IsError || slow.StructuredContent["end_reason"] != string(event.EndInterrupted) {
		t.Errorf("a call past its timeout: %+v", slow)
	}
	// The record names the MCP session and request (the client's ids count from 0: initialize
	// 0, tools/list 1, the calls 2...).
	rec := d.Call(t, ok.StructuredContent["call_id"].(string))
	if rec.Start.MCPSession == "" || rec.Start.MCPRequestID != "2" || rec.Start.Tool != "mcp-run" {
		t.Errorf("record: session %q request %q tool %q", rec.Start.MCPSession, rec.Start.MCPRequestID, rec.Start.Tool)
	}
	if r := d.Call(t, shadow.StructuredContent["call_id"].(string)); r.Record.Denials["policy"]+r.Record.Denials["isolation"] == 0 && r.Record.Counts.Denial == 0 {
		t.Errorf("cat /etc/shadow: no denial in the record: %+v", r.Record.Denials)
	}
	d.noCallLeft(t)
}

// Over Streamable HTTP, a bearer token is its tenant's: the calls run for it; a wrong token
// is refused before any call.
func TestServeOverHTTPRunsCallsForTheTokensTenant(t *testing.T) {
	node := nodeDir(t)
	d := startDaemon(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# tenant token\nacme acme-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := exec.Command(bermbin.Path(t, "berm-full"), "mcp", "serve", "--http", addr, "--tokens", tokens, "--socket", d.socket, "--daemon", "required")
	var log bytes.Buffer
	srv.Stderr = &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("berm mcp serve --http did not start: %s", log.String())
		}
	}
	o := tsClient(t, node, map[string]any{
		"http":  map[string]any{"url": "http://" + addr + "/", "token": "acme-0123456789abcdef"},
		"calls": []toolCall{{"run", map[string]any{"command": "echo $BERM_TENANT"}}},
	})
	r := o.Results[0]
	if r.IsError || strings.TrimSpace(r.text()) != "acme" {
		t.Fatalf("call over HTTP: %+v", r)
	}
	if c := d.Call(t, r.StructuredContent["call_id"].(string)); c.Start.Tenant != "acme" || c.Start.MCPSession == "" || c.Start.MCPRequestID == "" {
		t.Errorf("record: tenant %q session %q request %q", c.Start.Tenant, c.Start.MCPSession, c.Start.MCPRequestID)
	}
	b, _ := json.Marshal(map[string]any{"http": map[string]any{"url": "http://" + addr + "/", "token": "wrong-token-0123456789"}})
	out, _ := exec.Command("node", filepath.Join(node, "client.mjs"), string(b)).Output()
	if !strings.Contains(string(out), "connectError") {
		t.Errorf("a wrong token connected: %s", out)
	}
	d.noCallLeft(t)
}

// The reference filesystem server from npm, rooted at /, behind berm mcp proxy: a file the
// server would read but berm's policy refuses (/etc/shadow) is a tool error, and the server's
// trail holds the tools/call's start and end with the denial between them. --per-call gives
// each tools/call a server (and a record) of its own.
func TestProxyPutsTheFilesystemServerBehindBerm(t *testing.T) {
	node := nodeDir(t)
	d := startDaemon(t)
	full := bermbin.Path(t, "berm-full")
	server := filepath.Join(node, "node_modules", ".bin", "mcp-server-filesystem")
	for _, perCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("per-call=%v", perCall), func(t *testing.T) {
			args := []string{"mcp", "proxy", "--socket", d.socket, "--daemon", "required"}
			if perCall {
				args = append(args, "--per-call")
			}
			args = append(args, "--", server, "/")
			o := tsClient(t, node, map[string]any{
				"stdio": map[string]any{"command": full, "args": args},
				"calls": []toolCall{
					{"read_text_file", map[string]any{"path": "/etc/hostname"}},
					{"read_text_file", map[string]any{"path": "/etc/shadow"}},
				},
			})
			if len(o.Tools) < 3 {
				t.Fatalf("tools: %v", o.Tools)
			}
			host, _ := os.ReadFile("/etc/hostname")
			if ok := o.Results[0]; ok.IsError || !strings.Contains(ok.text(), strings.TrimSpace(string(host))) {
				t.Errorf("read /etc/hostname: %+v", ok)
			}
			if sh := o.Results[1]; !sh.IsError || strings.Contains(sh.text(), "root:") {
				t.Errorf("read /etc/shadow: not a tool error: %+v", sh)
			}
			// The trail: each tools/call's start and end; a denial of /etc/shadow between the
			// second's.
			var calls []audit.Call
			for _, c := range bermbin.Calls(t, d.state) {
				if c.Start.Tool == "mcp-mcp-server-filesystem" && c.Record != nil {
					calls = append(calls, c)
				}
			}
			var evs []event.Event
			for _, c := range calls {
				evs = append(evs, bermbin.Timeline(t, d.state, c.Start.CallID).Events...)
			}
			var shadowStart, shadowEnd *event.Event
			for i := range evs {
				e := &evs[i]
				if e.MCP != nil && strings.Contains(e.MCP.Arguments, "/etc/shadow") && e.MCP.Phase == "start" {
					shadowStart = e
				}
				if e.MCP != nil && shadowStart != nil && e.MCP.Phase == "end" && e.MCP.RequestID == shadowStart.MCP.RequestID && e.CallID == shadowStart.CallID {
					shadowEnd = e
				}
			}
			if shadowStart == nil || shadowEnd == nil {
				t.Fatalf("no start and end of the /etc/shadow tools/call in the trail")
			}
			if shadowEnd.MCP.Status != "tool_error" || shadowStart.MCP.Name != "read_text_file" {
				t.Errorf("marks: %+v %+v", shadowStart.MCP, shadowEnd.MCP)
			}
			denied := false
			for _, e := range evs {
				if e.CallID == shadowStart.CallID && e.Denial != nil && strings.Contains(e.Denial.Object, "/etc/shadow") &&
					!e.Time.Before(shadowStart.Time.Add(-time.Second)) && !e.Time.After(shadowEnd.Time) {
					denied = true
				}
			}
			if !denied {
				t.Errorf("no denial of /etc/shadow during the tools/call")
			}
			if perCall {
				c := d.Call(t, shadowStart.CallID)
				if c.Start.MCPRequestID != shadowStart.MCP.RequestID || c.Record.Counts.Denial == 0 {
					t.Errorf("--per-call: the tools/call's own record: request %q, denials %d", c.Start.MCPRequestID, c.Record.Counts.Denial)
				}
			}
		})
	}
	d.noCallLeft(t)
}

// A hostile client on stdio: garbage, a line that is not JSON-RPC, a message past the bound
// are each answered with a JSON-RPC error and the session goes on; a client that never reads
// its answers and then vanishes leaves no call behind.
func TestServeAnswersAHostileClient(t *testing.T) {
	d := startDaemon(t)
	full := bermbin.Path(t, "berm-full")
	t.Run("garbage and huge messages", func(t *testing.T) {
		cmd := exec.Command(full, "mcp", "serve", "--socket", d.socket, "--daemon", "required", "--max-message", "65536")
		huge := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run","arguments":{"command":"` + strings.Repeat("x", 200000) + `"}}}`
		cmd.Stdin = strings.NewReader(strings.Join([]string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`garbage{`,
			`[1,2,3]`,
			`{"id":3,"method":"tools/call"}`,
			huge,
			`{"jsonrpc":"2.0","id":4,"method":"no/such"}`,
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo still here"}}}`,
		}, "\n") + "\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("berm mcp serve: %v", err)
		}
		var codes []int
		var last string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m struct {
				ID     any                 `json:"id"`
				Error  *struct{ Code int } `json:"error"`
				Result json.RawMessage     `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("berm wrote a line that is not JSON: %q", line)
			}
			if m.Error != nil {
				codes = append(codes, m.Error.Code)
			}
			if m.ID == 5.0 {
				last = string(m.Result)
			}
		}
		if fmt.Sprint(codes) != "[-32700 -32600 -32600 -32600 -32601]" {
			t.Errorf("JSON-RPC error codes: %v\n%s", codes, out)
		}
		if !strings.Contains(last, "still here") {
			t.Errorf("the session did not go on after the garbage: %s", out)
		}
	})
	t.Run("a client that never reads", func(t *testing.T) {
		cmd := exec.Command(full, "mcp", "serve", "--socket", d.socket, "--daemon", "required")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe() // never read
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
		io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
		for i := range 8 {
			fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"command":"head -c 1000000 /dev/urandom | base64; sleep 1"}}}`+"\n", 10+i)
		}
		// Every call has begun and ended in bermd though nobody reads the answers.
		deadline := time.Now().Add(120 * time.Second)
		for {
			ended := 0
			for _, c := range bermbin.Calls(t, d.state) {
				if c.Start.Tool == "mcp-run" && c.Record != nil && c.Start.MCPSession != "" && strings.HasPrefix(c.Start.MCPRequestID, "1") {
					ended++
				}
			}
			if ended >= 8 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of 8 calls ended", ended)
			}
			time.Sleep(200 * time.Millisecond)
		}
		cmd.Process.Kill()
		cmd.Wait()
		stdout.Close()
		d.noCallLeft(t)
	})
}

// berm mcp proxy reads its client as serve does: garbage and oversized lines are answered with
// JSON-RPC errors and never reach the server, whose session goes on; at the client's end the
// server's call ends.
func TestProxyAnswersAHostileClient(t *testing.T) {
	node := nodeDir(t)
	d := startDaemon(t)
	server := filepath.Join(node, "node_modules", ".bin", "mcp-server-filesystem")
	cmd := exec.Command(bermbin.Path(t, "berm-full"), "mcp", "proxy", "--socket", d.socket, "--daemon", "required", "--max-message", "65536", "--", server, "/")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := json.NewDecoder(stdout)
	read := func() map[string]any {
		t.Helper()
		var m map[string]any
		if err := lines.Decode(&m); err != nil {
			t.Fatalf("proxy output: %v; the proxy's stderr:\n%s", err, stderr.String())
		}
		return m
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if m := read(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	for _, c := range []struct {
		line string
		code float64
	}{
		{"garbage{", -32700},
		{`{"id":7,"method":"tools/call"}`, -32600},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"` + strings.Repeat("a", 100000) + `"}}}`, -32600},
	} {
		io.WriteString(stdin, c.line+"\n")
		if m := read(); code(m) != c.code {
			t.Errorf("%.40s: answer %v, want code %v", c.line, m, c.code)
		}
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/etc/hostname"}}}`+"\n")
	if m := read(); m["id"] != 9.0 || m["result"] == nil {
		t.Errorf("the session did not go on: %v", m)
	}
	stdin.Close()
	d.noCallLeft(t)
}

// A call berm refuses (here: the server's policy does not compile) is a tool error that says
// why, with end_reason not_run; nothing ran.
func TestServeRefusedCallIsAToolError(t *testing.T) {
	d := startDaemon(t)
	pol := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: bad}\nspec:\n  filesystem:\n    raed: [/usr]\n"), 0o644)
	cmd := exec.Command(bermbin.Path(t, "berm-full"), "mcp", "serve", "--socket", d.socket, "--daemon", "required", "--policy", pol)
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"command":"touch ran"}}}`,
	}, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("berm mcp serve: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var m struct {
		Result toolResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatal(err)
	}
	r := m.Result
	if !r.IsError || r.StructuredContent["end_reason"] != "not_run" || !strings.Contains(r.text(), "raed") {
		t.Errorf("a refused call: %+v", r)
	}
	d.noCallLeft(t)
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
