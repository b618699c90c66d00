// Package mcpserve is `berm mcp`: berm's tools for any MCP client (serve) and an existing MCP
// server put behind berm (proxy). Each tool call is a berm call, handed to bermd as berm run
// hands its own (runcli, callproto). See README.md.
package mcpserve

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/cmd/internal/runcli"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Version is what berm's MCP servers say they are.
const Version = "0.1.0"

// serveConfig is berm mcp serve's own flags; the rest are berm run's, fixed by whoever
// configured the server (never the model).
type serveConfig struct {
	http       string
	tokens     string
	maxOutput  int
	maxCalls   int
	maxMessage int
	maxTimeout time.Duration
	runFlags   []string
	log        *slog.Logger
}

// ownFlags are the flags serve and proxy read themselves: the rest go to berm run's parser.
func splitFlags(args []string, own map[string]bool) (mine, run []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			run = append(run, args[i:]...)
			break
		}
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && own[name] {
			mine = append(mine, a)
			if !hasVal && !boolFlag[name] && i+1 < len(args) {
				i++
				mine = append(mine, args[i])
			}
			continue
		}
		run = append(run, a)
	}
	return mine, run
}

var boolFlag = map[string]bool{"per-call": true}

// Serve is `berm mcp serve`.
func Serve(args []string) int {
	own := map[string]bool{"http": true, "tokens": true, "max-output": true, "max-calls": true, "max-message": true, "max-timeout": true}
	mine, run := splitFlags(args, own)
	c := serveConfig{runFlags: run, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fs := flag.NewFlagSet("mcp serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: berm mcp serve [--http ADDR --tokens FILE] [--max-output N] [--max-calls N] [--max-timeout D] [berm run flags]")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "berm run's flags (--policy, --tenant, --timeout, --memory, --workspace, ...) configure every call; see berm run -h")
	}
	fs.StringVar(&c.http, "http", "", "serve Streamable HTTP on ADDR (host:port; an empty host is 127.0.0.1) instead of stdio")
	fs.StringVar(&c.tokens, "tokens", "", "bearer tokens for --http: one 'TENANT TOKEN' a line; the file must be readable by its owner only")
	fs.IntVar(&c.maxOutput, "max-output", 64<<10, "bytes of stdout and of stderr returned to the client per call (the rest is counted, not returned)")
	fs.IntVar(&c.maxCalls, "max-calls", 4, "tool calls run at once (more wait)")
	fs.IntVar(&c.maxMessage, "max-message", DefaultMaxMessage, "bytes of one JSON-RPC message")
	fs.DurationVar(&c.maxTimeout, "max-timeout", 10*time.Minute, "the most a model's timeout may ask for")
	if helpAsked(args) {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return 0
	}
	if err := fs.Parse(mine); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "berm mcp serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	// The run flags are checked once, now: a bad one is the operator's mistake, not a call's.
	o, err := c.options("true")
	if err != nil {
		return 2
	}
	if o.Daemon == "never" || o.StateDirGiven {
		fmt.Fprintln(os.Stderr, "berm mcp serve: every call goes through bermd: --daemon never and --state-dir are not for it")
		return 2
	}
	s := &server{cfg: c, sem: make(chan struct{}, max(c.maxCalls, 1))}
	if c.http != "" {
		if err := s.serveHTTP(); err != nil {
			fmt.Fprintf(os.Stderr, "berm mcp serve: %v\n", err)
			return 1
		}
		return 0
	}
	srv := s.newServer("")
	t := &stdioTransport{in: os.Stdin, out: os.Stdout, max: c.maxMessage, session: newSessionID()}
	if err := srv.Run(context.Background(), t); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "berm mcp serve: %v\n", err)
		return 1
	}
	return 0
}

// helpAsked: -h or --help among the flags (before any --), which the command answers with its
// own usage, on stdout, and success.
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--h", "-help", "--help":
			return true
		}
	}
	return false
}

// options are berm run's for one call of command.
func (c *serveConfig) options(command string) (*runcli.Options, error) {
	args := append([]string{"--tool", "mcp-run"}, c.runFlags...)
	if i := indexOf(args, "--"); i >= 0 {
		return nil, fmt.Errorf("berm mcp serve takes no command: the model names it")
	}
	return runcli.Parse(append(args, "--", "/bin/sh", "-c", command))
}

func indexOf(l []string, s string) int {
	for i, v := range l {
		if v == s {
			return i
		}
	}
	return -1
}

func newSessionID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "stdio-" + hex.EncodeToString(b)
}

type server struct {
	cfg serveConfig
	sem chan struct{}
}

// RunInput is the run tool's input.
type RunInput struct {
	Command string  `json:"command" jsonschema:"shell command, run by /bin/sh -c in the call's own workspace inside a berm sandbox"`
	Stdin   string  `json:"stdin,omitempty" jsonschema:"bytes for the command's standard input (default: none)"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds before the call is ended (at most the server's cap; default: the policy's wall time)"`
}

// RunOutput is the run tool's structured result: the berm call's end.
type RunOutput struct {
	CallID     string `json:"call_id"`
	ExitStatus int    `json:"exit_status"`
	// EndReason is the record's (exit, timeout, policy_kill, ...), or not_run when berm
	// refused the call before it started (EndDetail says why).
	EndReason string `json:"end_reason"`
	EndDetail string `json:"end_detail,omitempty"`
	Complete  bool   `json:"complete"`
	// Denials are the call's denials per surface, Alerts the detection rules that fired.
	Denials     map[string]uint64 `json:"denials"`
	DenialCount uint64            `json:"denial_count"`
	Alerts      uint64            `json:"alerts"`
	// Truncated: stdout or stderr were longer than the server returns (--max-output).
	Truncated bool `json:"truncated,omitempty"`
}

func (s *server) newServer(tenant string) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "berm", Version: Version}, &mcp.ServerOptions{Logger: s.cfg.log})
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "run",
		Description: "Run a shell command in a fresh berm sandbox (its own workspace, the server's policy) and return its output and how it ended.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
		return s.run(ctx, req, in, tenant)
	})
	return srv
}

func (s *server) run(ctx context.Context, req *mcp.CallToolRequest, in RunInput, tenant string) (*mcp.CallToolResult, RunOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, RunOutput{}, errors.New("command is empty")
	}
	if in.Timeout < 0 || time.Duration(in.Timeout*float64(time.Second)) > s.cfg.maxTimeout {
		return nil, RunOutput{}, fmt.Errorf("timeout: expected 0 to %g seconds", s.cfg.maxTimeout.Seconds())
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		return nil, RunOutput{}, ctx.Err()
	}
	o, err := s.cfg.options(in.Command)
	if err != nil {
		return nil, RunOutput{}, err
	}
	r := &o.Request
	if tenant != "" {
		r.Tenant = tenant
	}
	if req.Session != nil {
		r.MCPSession = req.Session.ID()
	}
	if r.MCPSession == "" {
		r.MCPSession = "stdio"
	}
	if id, ok := req.Params.Meta[metaRequestID].(string); ok {
		r.MCPRequestID = id
	}
	r.MCPSession, r.MCPRequestID = capID(r.MCPSession), capID(r.MCPRequestID)
	// The client's trace context, a W3C traceparent in the request's _meta (where MCP clients
	// propagate it): the call's OpenTelemetry span is its child. One not in W3C's format is
	// ignored, as W3C says of an invalid traceparent: the call starts a trace of its own.
	if tp, ok := req.Params.Meta["traceparent"].(string); ok && event.ValidTraceParent(tp) == nil {
		r.TraceParent = tp
	}
	out := RunOutput{CallID: r.CallID, EndReason: "not_run", Denials: map[string]uint64{}}
	notRun := func(err error) (*mcp.CallToolResult, RunOutput, error) {
		out.EndDetail = err.Error()
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "berm: " + err.Error()}}}, out, nil
	}
	if !o.ViaDaemon() {
		return notRun(errors.New("no bermd runs and none could be started"))
	}
	res, err := callWithOutput(ctx, o, []byte(in.Stdin), time.Duration(in.Timeout*float64(time.Second)), s.cfg.maxOutput)
	if err != nil {
		return notRun(err)
	}
	rep := res.reply
	if rep.Record == nil {
		return notRun(errors.New(rep.Error))
	}
	rec := rep.Record
	out.ExitStatus, out.EndReason, out.EndDetail, out.Complete = rep.ExitStatus, string(rec.EndReason), rec.EndDetail, rec.Complete
	if res.timedOut {
		out.EndDetail = fmt.Sprintf("the tool call's timeout of %gs", in.Timeout)
	}
	for k, v := range rec.Denials {
		out.Denials[k] = v
		out.DenialCount += v
	}
	out.Alerts = rec.Counts.Alert
	stdout, t1 := capText(res.stdout.Bytes(), s.cfg.maxOutput)
	stderr, t2 := capText(res.stderr.Bytes(), s.cfg.maxOutput)
	out.Truncated = t1 || t2 || res.stdout.over || res.stderr.over
	var content []mcp.Content
	if stdout != "" {
		content = append(content, &mcp.TextContent{Text: stdout})
	}
	if stderr != "" {
		content = append(content, &mcp.TextContent{Text: "stderr:\n" + stderr})
	}
	if rec.EndReason != event.EndExit || rep.ExitStatus != 0 || out.DenialCount > 0 {
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("berm: call %s ended: %s%s, status %d, %d denials, %d alerts", rec.CallID, rec.EndReason, paren(out.EndDetail), rep.ExitStatus, out.DenialCount, out.Alerts)})
	}
	if len(content) == 0 {
		content = append(content, &mcp.TextContent{Text: ""})
	}
	return &mcp.CallToolResult{Content: content, IsError: rep.ExitStatus != 0 || rec.EndReason != event.EndExit}, out, nil
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func capID(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// capped keeps the first n bytes written to it and counts the rest.
type capped struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	n    int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.n + 1 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	if c.buf.Len() > c.n {
		c.over = true
	}
	return len(p), nil
}

func (c *capped) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes()
}

type callResult struct {
	reply          callproto.Reply
	stdout, stderr *capped
	timedOut       bool
}

// callWithOutput runs the call through bermd with stdin from the given bytes and stdout and
// stderr into pipes read here (kept up to cap, the rest drained), ending it (as interrupted)
// when ctx is done or timeout passes.
func callWithOutput(ctx context.Context, o *runcli.Options, stdin []byte, timeout time.Duration, keep int) (*callResult, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	defer outW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer errR.Close()
	defer errW.Close()
	call, cleanup, err := o.Start([3]*os.File{inR, outW, errW})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	// bermd holds its own copies now: ours go, so the readers see the tool's end.
	inR.Close()
	outW.Close()
	errW.Close()
	res := &callResult{stdout: &capped{n: keep}, stderr: &capped{n: keep}}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _, _ = inW.Write(stdin); inW.Close() }()
	go func() { defer wg.Done(); _, _ = io.Copy(res.stdout, outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(res.stderr, errR) }()
	done := make(chan struct{})
	go func() {
		var timer <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-done:
		case <-ctx.Done():
			_ = call.Interrupt("the MCP request was cancelled")
		case <-timer:
			res.timedOut = true
			_ = call.Interrupt(fmt.Sprintf("the tool call's timeout of %s", timeout))
		}
	}()
	err = call.Wait(&res.reply)
	close(done)
	// A process of the call that kept the pipes is gone with it (bermd ends every process
	// before it replies); a stdin the tool never read must not hold us.
	inW.Close()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return res, nil
}

// serveHTTP serves Streamable HTTP, each request authenticated by its bearer token, whose
// tenant the calls are made for.
func (s *server) serveHTTP() error {
	if s.cfg.tokens == "" {
		return errors.New("--http needs --tokens: every HTTP client is authenticated")
	}
	tokens, err := loadTokens(s.cfg.tokens)
	if err != nil {
		return err
	}
	addr := s.cfg.http
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: %w", addr, err)
	}
	if host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	servers := map[string]*mcp.Server{}
	var mu sync.Mutex
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			return nil
		}
		tenant := ti.UserID
		mu.Lock()
		defer mu.Unlock()
		if servers[tenant] == nil {
			servers[tenant] = s.newServer(tenant)
		}
		return servers[tenant]
	}, &mcp.StreamableHTTPOptions{Logger: s.cfg.log})
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		t, ok := tokens.lookup(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: t, Expiration: time.Now().Add(time.Hour)}, nil
	}
	handler := auth.RequireBearerToken(verify, nil)(withRequestIDs(h, s.cfg.maxMessage))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "berm mcp serve: listening on http://%s/\n", ln.Addr())
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	return hs.Serve(ln)
}
