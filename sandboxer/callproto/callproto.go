// Package callproto is the run protocol between `berm run` and bermd: the request that
// describes one tool call, the caller's stdio passed as file descriptors, and the reply with
// the call record. It links nothing but the event types and x/sys/unix, because the berm
// front that speaks it starts once per call: every package it links is start-up time.
//
// On the wire, over bermd's unix socket: one byte 'R' carrying stdin, stdout and stderr as
// SCM_RIGHTS, then the Request as one JSON line. While the call runs, the client may send
// Interrupt lines; the daemon ends with one Reply line. A client that goes away ends its
// call (client_lost): the daemon kills it, nothing of it outlives the connection.
package callproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// DefaultSocket is where bermd listens.
const DefaultSocket = "/run/berm/bermd.sock"

// RunMagic is the first byte of a run connection; it carries the caller's stdio.
const RunMagic = 'R'

// Request is one tool call, as `berm run` resolved it in the caller's context: paths are
// absolute, the environment is the tool's whole environment, the caps are the flags' values.
type Request struct {
	// Version is the protocol version the client speaks (Version); empty is 1.0, the
	// protocol before it had a version. bermd refuses a major version it does not speak.
	Version   string       `json:"version,omitempty"`
	CallID    string       `json:"call_id"`
	Tool      string       `json:"tool"`
	Tenant    string       `json:"tenant"`
	Argv      []string     `json:"argv"`
	Workspace string       `json:"workspace"`
	Env       []string     `json:"env"`
	Limits    event.Limits `json:"limits"`
	// Explicit names the cap flags the caller gave: those win over the policy's caps.
	Explicit []string `json:"explicit,omitempty"`
	// PolicyFile is the policy to run under (absolute path); empty is the built-in strict one.
	PolicyFile string   `json:"policy_file,omitempty"`
	Traced     []uint32 `json:"traced,omitempty"`
	// Terminal is set when the caller's stdin is a terminal: the stdin passed with the
	// request is then the master of a pty berm allocated for the call, never the caller's
	// terminal, which stays with the caller (it relays it to the master).
	Terminal *Terminal `json:"terminal,omitempty"`
	// DNSUpstream is where the call's allowed DNS queries go (berm run --dns-upstream);
	// empty: bermd's --dns-upstream, else the host's resolv.conf.
	DNSUpstream string `json:"dns_upstream,omitempty"`
	// MCPSession and MCPRequestID name the MCP tools/call the call serves (berm mcp serve):
	// its session and JSON-RPC id, kept in the call's record.
	MCPSession   string `json:"mcp_session,omitempty"`
	MCPRequestID string `json:"mcp_request_id,omitempty"`
	// TraceParent is the caller's W3C trace context (berm run --traceparent): the call's
	// span is exported as a child of it. Checked with event.ValidTraceParent.
	TraceParent string `json:"traceparent,omitempty"`
}

// Terminal is how a call uses its pty. The tool gets the pty's other end as stdin and
// controlling terminal, in a session of its own, and as stdout and stderr where the caller's
// are terminals too (elsewhere they stay what they are, so `berm run ... > file` writes the
// tool's own bytes). What the tool writes to the pty (and its echo) is read from the master
// and written to the caller's stdout, or its stderr when only that is a terminal.
type Terminal struct {
	Stdout bool `json:"stdout,omitempty"`
	Stderr bool `json:"stderr,omitempty"`
}

// Interrupt asks the daemon to end the running call (the caller got SIGINT or SIGTERM).
type Interrupt struct {
	Signal string `json:"signal"`
}

// Mark is a line the client may send while the call runs instead of an Interrupt: berm's
// MCP proxy, which relays a client's requests to the MCP server the call runs, saying it
// passed one on (or got its answer). The daemon records it in the call's trail as a KindMCP
// event, timed when it reads it.
type Mark struct {
	MCP *event.MCP `json:"mcp"`
}

// ClientLine is any line a client sends while its call runs: an Interrupt or a Mark.
type ClientLine struct {
	Signal string     `json:"signal,omitempty"`
	MCP    *event.MCP `json:"mcp,omitempty"`
}

// Stop ends a running call early, for a reason of the caller's or the daemon's. A Stop with
// MCP set ends nothing: it is a Mark for the call's trail.
type Stop struct {
	Reason event.EndReason
	Detail string
	MCP    *event.MCP
}

// Reply ends a run connection.
type Reply struct {
	// Version is the protocol version bermd speaks (Version).
	Version    string            `json:"version,omitempty"`
	Record     *event.CallRecord `json:"record,omitempty"`
	ExitStatus int               `json:"exit_status"`
	// Error is about berm (a bad request, a policy that does not compile, set-up); with no
	// record the call did not run. Warning is a problem recording a call that did run.
	Error   string `json:"error,omitempty"`
	Warning string `json:"warning,omitempty"`
}

// RawReply is a Reply with its record left as the bytes bermd sent (one JSON object), for a
// caller that needs only a few of its fields: decoding a whole CallRecord in a process that
// has never decoded one costs the berm front about twice what those fields cost.
type RawReply struct {
	Version    string          `json:"version,omitempty"`
	Record     json.RawMessage `json:"record,omitempty"`
	ExitStatus int             `json:"exit_status"`
	Error      string          `json:"error,omitempty"`
	Warning    string          `json:"warning,omitempty"`
}

// Version is the run protocol's version, MAJOR.MINOR (PROTOCOL.md): a new minor version only
// adds optional fields, which an older peer ignores; a new major version changes the wire.
const Version = "1.2"

// Major is Version's major number: bermd refuses a request of another.
const Major = 1

// CheckVersion says whether a peer's version is one this side speaks: the same major
// version (any minor), or empty (1.0, before the field existed).
func CheckVersion(v string) error {
	if v == "" {
		return nil
	}
	maj, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(maj)
	if err != nil || n < 0 {
		return fmt.Errorf("protocol version %q: expected MAJOR.MINOR such as %s", v, Version)
	}
	if n != Major {
		return fmt.Errorf("protocol version %s not supported: this bermd speaks %d.x (%s)", v, Major, Version)
	}
	return nil
}

// Available reports whether a daemon answers on the socket.
func Available(socket string) bool {
	fd, err := dial(socket)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// dial connects to the socket. Raw syscalls, not package net: net would link the C resolver
// (a dynamically linked front pays for the loader on every call) for a unix socket.
func dial(socket string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: socket}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Conn is a connection to bermd for one call, made before the call is sent: a caller that
// looks for a running bermd keeps the connection that found it, instead of connecting twice.
type Conn struct{ fd int }

// Dial connects to bermd for one call.
func Dial(socket string) (*Conn, error) {
	fd, err := dial(socket)
	if err != nil {
		return nil, fmt.Errorf("connect to bermd at %s: %w", socket, err)
	}
	return &Conn{fd: fd}, nil
}

// Close lets go of a connection that will run no call.
func (c *Conn) Close() error {
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// Run sends the call to bermd with the given stdio and waits for its end. Values sent on
// interrupts are forwarded while the call runs.
func Run(socket string, req *Request, stdio [3]*os.File, interrupts <-chan os.Signal) (*Reply, error) {
	c, err := Dial(socket)
	if err != nil {
		return nil, err
	}
	return c.Run(req, stdio, interrupts)
}

// RunRaw is Run, with the reply's record not decoded (RawReply).
func RunRaw(socket string, req *Request, stdio [3]*os.File, interrupts <-chan os.Signal) (*RawReply, error) {
	c, err := Dial(socket)
	if err != nil {
		return nil, err
	}
	return c.RunRaw(req, stdio, interrupts)
}

// Run sends the call over the connection, as Run does; the connection is closed after.
func (c *Conn) Run(req *Request, stdio [3]*os.File, interrupts <-chan os.Signal) (*Reply, error) {
	var rep Reply
	if err := c.run(req, stdio, interrupts, &rep); err != nil {
		return nil, err
	}
	if rep.Record == nil && rep.Error == "" {
		return nil, errors.New("bermd replied without a record or an error")
	}
	return &rep, nil
}

// RunRaw is Run, with the reply's record not decoded (RawReply).
func (c *Conn) RunRaw(req *Request, stdio [3]*os.File, interrupts <-chan os.Signal) (*RawReply, error) {
	var rep RawReply
	if err := c.run(req, stdio, interrupts, &rep); err != nil {
		return nil, err
	}
	if (len(rep.Record) == 0 || string(rep.Record) == "null") && rep.Error == "" {
		return nil, errors.New("bermd replied without a record or an error")
	}
	return &rep, nil
}

func (c *Conn) run(req *Request, stdio [3]*os.File, interrupts <-chan os.Signal, rep any) error {
	call, err := c.Start(req, stdio)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case s := <-interrupts:
				_ = call.Interrupt(s.String())
			}
		}
	}()
	return call.Wait(rep)
}

// Call is a call sent to bermd, running until Wait returns.
type Call struct {
	conn *os.File
	mu   sync.Mutex
	enc  *json.Encoder
}

// Start sends the call over the connection with the given stdio (bermd holds its own copies:
// the caller may close them once Start returns); the connection is the call's from then on.
func (c *Conn) Start(req *Request, stdio [3]*os.File) (*Call, error) {
	fd := c.fd
	if fd < 0 {
		return nil, errors.New("connection to bermd already used or closed")
	}
	c.fd = -1
	conn := os.NewFile(uintptr(fd), "bermd")
	rights := unix.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()))
	if err := unix.Sendmsg(fd, []byte{RunMagic}, rights, nil, 0); err != nil {
		conn.Close()
		return nil, fmt.Errorf("send stdio to bermd: %w", err)
	}
	if req.Version == "" {
		req.Version = Version
	}
	call := &Call{conn: conn, enc: json.NewEncoder(conn)}
	if err := call.enc.Encode(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("send call to bermd: %w", err)
	}
	return call, nil
}

// Interrupt asks bermd to end the call (as interrupted, by the named signal).
func (c *Call) Interrupt(signal string) error { return c.send(Interrupt{Signal: signal}) }

// Mark has bermd record an MCP request relayed to the call's server in its trail (Mark).
func (c *Call) Mark(m *event.MCP) error { return c.send(Mark{MCP: m}) }

func (c *Call) send(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enc.Encode(v)
}

// Wait reads the reply (a Reply or a RawReply) and closes the connection.
func (c *Call) Wait(rep any) error {
	defer c.conn.Close()
	if err := json.NewDecoder(bufio.NewReader(c.conn)).Decode(rep); err != nil {
		return fmt.Errorf("bermd ended the call without a reply: %w", err)
	}
	return nil
}
