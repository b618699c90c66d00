package mcpserve

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/cmd/internal/runcli"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// proxy is berm mcp proxy: a client on this process's stdio, a sandboxed server behind.
type proxy struct {
	runFlags   []string // berm run's, with the server's policy
	argv       []string // the server's command
	perCall    bool
	maxMessage int
	session    string
	client     *lineWriter

	mu      sync.Mutex
	initReq []byte // the client's initialize, replayed to each --per-call server

	ending atomic.Bool // the client has gone: the server's end is expected
	policy string      // the server's policy file, removed at exit
}

// exit ends the proxy when its server ended on its own.
func (p *proxy) exit(code int) {
	if p.ending.Load() {
		return
	}
	os.Remove(p.policy)
	os.Exit(code)
}

// Proxy is `berm mcp proxy`.
func Proxy(args []string) int {
	own := map[string]bool{"per-call": true, "max-message": true}
	mine, run := splitFlags(args, own)
	fs := flag.NewFlagSet("mcp proxy", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: berm mcp proxy [--per-call] [--max-message N] [berm run flags] -- CMD [ARGS...]")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "berm run's flags (--policy, --tenant, --timeout, --memory, ...) configure the server's sandbox; see berm run -h")
	}
	perCall := fs.Bool("per-call", false, "start a fresh sandboxed server for each tools/call (stateless servers)")
	maxMessage := fs.Int("max-message", DefaultMaxMessage, "bytes of one JSON-RPC message, either way")
	if helpAsked(args) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return 0
	}
	if err := fs.Parse(mine); err != nil {
		return 2
	}
	i := indexOf(run, "--")
	if i < 0 || i == len(run)-1 {
		fmt.Fprintln(os.Stderr, "berm mcp proxy: no server command; usage: berm mcp proxy [flags] -- CMD [ARGS...]")
		return 2
	}
	flags, argv := run[:i], run[i+1:]
	o, err := runcli.Parse(append(append([]string{}, flags...), "--", "true"))
	if err != nil {
		return 2
	}
	if o.Daemon == "never" || o.StateDirGiven {
		fmt.Fprintln(os.Stderr, "berm mcp proxy: the server runs through bermd: --daemon never and --state-dir are not for it")
		return 2
	}
	extra, err := serverPaths(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm mcp proxy: %v\n", err)
		return 1
	}
	pol, err := serverPolicy(o.Request.PolicyFile, extra, "/run/berm/mcp")
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm mcp proxy: %v\n", err)
		return 1
	}
	defer os.Remove(pol)
	tool := "mcp-" + toolName(filepath.Base(argv[0]))
	p := &proxy{
		runFlags: append(append([]string{"--tool", tool}, flags...), "--policy", pol),
		argv:     append([]string{}, argv...), perCall: *perCall, maxMessage: *maxMessage,
		session: "proxy-" + strings.TrimPrefix(newSessionID(), "stdio-"), client: &lineWriter{w: os.Stdout},
		policy: pol,
	}
	return p.run()
}

var toolNameRE = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func toolName(s string) string {
	s = toolNameRE.ReplaceAllString(s, "_")
	if len(s) > 50 {
		s = s[:50]
	}
	return s
}

// upstream is one sandboxed server: a berm call whose stdin and stdout are pipes of ours.
type upstream struct {
	call    *callproto.Call
	in      *os.File
	toSrv   *lineWriter
	fromSrv *lineReader
	out     *os.File
	cleanup func()
	ended   chan struct{}
	reply   callproto.Reply
	err     error
}

// start launches a server; reqID names the tools/call it is for (--per-call).
func (p *proxy) start(reqID string) (*upstream, error) {
	o, err := runcli.Parse(append(append([]string{}, p.runFlags...), append([]string{"--"}, p.argv...)...))
	if err != nil {
		return nil, err
	}
	o.Request.MCPSession, o.Request.MCPRequestID = p.session, capID(reqID)
	if !o.ViaDaemon() {
		return nil, errors.New("no bermd runs and none could be started")
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	call, cleanup, err := o.Start([3]*os.File{inR, outW, os.Stderr})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	u := &upstream{call: call, in: inW, toSrv: &lineWriter{w: inW}, fromSrv: newLineReader(outR, p.maxMessage), out: outR, cleanup: cleanup, ended: make(chan struct{})}
	go func() {
		u.err = call.Wait(&u.reply)
		u.in.Close()
		u.cleanup()
		close(u.ended)
	}()
	return u, nil
}

// stop ends a server: its stdin closes (an MCP server's way out); after grace it is ended.
func (u *upstream) stop(grace time.Duration) {
	u.in.Close()
	select {
	case <-u.ended:
	case <-time.After(grace):
		_ = u.call.Interrupt("the MCP client went away")
		<-u.ended
	}
	u.out.Close()
}

// pending is the tools/call being served.
type pending struct {
	env   *envelope
	start time.Time
	done  chan struct{}
}

func (p *proxy) run() int {
	ctl, err := p.start("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm mcp proxy: %v\n", err)
		return 1
	}
	queue := make(chan *envelope, 64)
	var (
		mu  sync.Mutex
		cur *pending
	)
	// server -> client: every line passes, an answer to the tools/call in flight ends it.
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		for {
			line, err := ctl.fromSrv.next()
			if errors.Is(err, errTooLarge) {
				fmt.Fprintf(os.Stderr, "berm mcp proxy: the server sent a message of more than %d bytes: dropped\n", p.maxMessage)
				continue
			}
			if err != nil {
				return
			}
			env, rerr := parseEnvelope(line)
			if rerr != nil {
				fmt.Fprintf(os.Stderr, "berm mcp proxy: the server sent a line that is not JSON-RPC: dropped\n")
				continue
			}
			if env.isResponse() {
				mu.Lock()
				if cur != nil && string(cur.env.ID) == string(env.ID) {
					_ = ctl.call.Mark(endMark(cur, env, p.session))
					close(cur.done)
					cur = nil
				}
				mu.Unlock()
			}
			if p.client.writeLine(line) != nil {
				return
			}
		}
	}()
	// One tools/call at a time: the server's events between its marks are its.
	go func() {
		for env := range queue {
			if p.perCall {
				p.servePerCall(env)
				continue
			}
			pc := &pending{env: env, start: time.Now(), done: make(chan struct{})}
			mu.Lock()
			cur = pc
			mu.Unlock()
			_ = ctl.call.Mark(startMark(env, p.session))
			if ctl.toSrv.writeLine(mustJSON(env)) != nil {
				break
			}
			select {
			case <-pc.done:
			case <-serverDone:
				mu.Lock()
				if cur == pc {
					cur = nil
					_ = p.client.writeLine(rpcError(env.ID, codeInternalError, "berm: the MCP server ended before it answered"))
				}
				mu.Unlock()
			}
		}
	}()
	// A server that ends ends the session: its client hears so (its stdout closes) instead of
	// waiting for answers that cannot come.
	go func() {
		<-serverDone
		<-ctl.ended
		if ctl.reply.Record != nil {
			r := ctl.reply.Record
			fmt.Fprintf(os.Stderr, "berm mcp proxy: the MCP server (call %s) ended: %s%s, status %d\n", r.CallID, r.EndReason, paren(r.EndDetail), ctl.reply.ExitStatus)
		} else if ctl.err != nil || ctl.reply.Error != "" {
			fmt.Fprintf(os.Stderr, "berm mcp proxy: the MCP server did not run: %v%s\n", ctl.err, ctl.reply.Error)
		}
		p.exit(1)
	}()
	lr := newLineReader(os.Stdin, p.maxMessage)
	for {
		line, err := lr.next()
		if errors.Is(err, errTooLarge) {
			_ = p.client.writeLine(rpcError(nil, codeInvalidRequest, fmt.Sprintf("message of more than %d bytes", p.maxMessage)))
			continue
		}
		if err != nil {
			break
		}
		env, rerr := parseEnvelope(line)
		if rerr != nil {
			_ = p.client.writeLine(rerr)
			continue
		}
		if env.Method == "initialize" && env.isRequest() {
			p.mu.Lock()
			p.initReq = append([]byte{}, line...)
			p.mu.Unlock()
		}
		if env.Method == "tools/call" && env.isRequest() {
			select {
			case queue <- env:
			default:
				_ = p.client.writeLine(rpcError(env.ID, codeInternalError, "berm: too many tools/call requests waiting"))
			}
			continue
		}
		if ctl.toSrv.writeLine(line) != nil {
			break
		}
	}
	p.ending.Store(true)
	close(queue)
	ctl.stop(5 * time.Second)
	<-serverDone
	if ctl.err != nil {
		fmt.Fprintf(os.Stderr, "berm mcp proxy: %v\n", ctl.err)
		return 1
	}
	if ctl.reply.Record == nil {
		fmt.Fprintf(os.Stderr, "berm mcp proxy: %s\n", ctl.reply.Error)
		return 1
	}
	return 0
}

// servePerCall serves one tools/call with a server of its own: the client's initialize
// replayed, the call, its answer, the server ended.
func (p *proxy) servePerCall(env *envelope) {
	fail := func(msg string) { _ = p.client.writeLine(rpcError(env.ID, codeInternalError, "berm: "+msg)) }
	p.mu.Lock()
	initReq := p.initReq
	p.mu.Unlock()
	if initReq == nil {
		fail("tools/call before initialize")
		return
	}
	u, err := p.start(string(env.ID))
	if err != nil {
		fail(err.Error())
		return
	}
	defer u.stop(5 * time.Second)
	var init map[string]json.RawMessage
	_ = json.Unmarshal(initReq, &init)
	init["id"] = json.RawMessage(`"berm-init"`)
	if u.toSrv.writeLine(mustJSON(init)) != nil {
		fail("the MCP server ended before it started")
		return
	}
	if _, ok := p.awaitResponse(u, json.RawMessage(`"berm-init"`), false); !ok {
		fail("the MCP server ended before it was initialized")
		return
	}
	_ = u.toSrv.writeLine([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	pc := &pending{env: env, start: time.Now()}
	_ = u.call.Mark(startMark(env, p.session))
	if u.toSrv.writeLine(mustJSON(env)) != nil {
		fail("the MCP server ended before it answered")
		return
	}
	resp, ok := p.awaitResponse(u, env.ID, true)
	if !ok {
		_ = u.call.Mark(&event.MCP{Phase: "end", Method: env.Method, Name: toolOf(env), RequestID: string(env.ID), Session: p.session, Status: "no_reply", DurationNs: int64(time.Since(pc.start))})
		fail("the MCP server ended before it answered")
		return
	}
	_ = u.call.Mark(endMark(pc, resp.env, p.session))
	_ = p.client.writeLine(resp.line)
}

type response struct {
	env  *envelope
	line []byte
}

// awaitResponse reads the server until its answer to id; notifications on the way pass to
// the client when forward says so.
func (p *proxy) awaitResponse(u *upstream, id json.RawMessage, forward bool) (*response, bool) {
	for {
		line, err := u.fromSrv.next()
		if errors.Is(err, errTooLarge) {
			continue
		}
		if err != nil {
			return nil, false
		}
		env, rerr := parseEnvelope(line)
		if rerr != nil {
			continue
		}
		if env.isResponse() && string(env.ID) == string(id) {
			return &response{env, line}, true
		}
		if forward && !env.isRequest() && !env.isResponse() {
			_ = p.client.writeLine(line)
		}
	}
}

func mustJSON(v any) []byte {
	if e, ok := v.(*envelope); ok {
		b, _ := json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params,omitempty"`
		}{"2.0", e.ID, e.Method, e.Params})
		return b
	}
	b, _ := json.Marshal(v)
	return b
}

func toolOf(env *envelope) string {
	var p struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(env.Params, &p)
	return p.Name
}

func startMark(env *envelope, session string) *event.MCP {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	_ = json.Unmarshal(env.Params, &p)
	return &event.MCP{Phase: "start", Method: env.Method, Name: capID(p.Name), RequestID: capID(string(env.ID)), Session: session, Arguments: redactArgs(p.Arguments)}
}

func endMark(pc *pending, resp *envelope, session string) *event.MCP {
	status := "ok"
	if len(resp.Error) > 0 && string(resp.Error) != "null" {
		status = "error"
	} else {
		var r struct {
			IsError bool `json:"isError"`
		}
		_ = json.Unmarshal(resp.Result, &r)
		if r.IsError {
			status = "tool_error"
		}
	}
	return &event.MCP{Phase: "end", Method: pc.env.Method, Name: capID(toolOf(pc.env)), RequestID: capID(string(pc.env.ID)), Session: session, Status: status, DurationNs: int64(time.Since(pc.start))}
}

// sensitiveKey names arguments whose values are not recorded.
var sensitiveKey = regexp.MustCompile(`(?i)pass|secret|token|api[-_]?key|auth|credential|cookie|private`)

// maxArgs bounds the arguments recorded in a start mark.
const maxArgs = 1024

// redactArgs is the arguments as recorded: values of sensitive-looking keys replaced, capped.
func redactArgs(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "(not JSON)"
	}
	b, _ := json.Marshal(redactValue(v, 0))
	s, _ := capText(b, maxArgs)
	return s
}

func redactValue(v any, depth int) any {
	if depth > 16 {
		return "[berm:too deep]"
	}
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if sensitiveKey.MatchString(k) {
				t[k] = "[berm:redacted]"
			} else {
				t[k] = redactValue(x, depth+1)
			}
		}
	case []any:
		for i, x := range t {
			t[i] = redactValue(x, depth+1)
		}
	}
	return v
}
