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

// Stop ends a running call early, for a reason of the caller's or the daemon's.
type Stop struct {
	Reason event.EndReason
	Detail string
}

// Reply ends a run connection.
type Reply struct {
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
	Record     json.RawMessage `json:"record,omitempty"`
	ExitStatus int             `json:"exit_status"`
	Error      string          `json:"error,omitempty"`
	Warning    string          `json:"warning,omitempty"`
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
	fd := c.fd
	if fd < 0 {
		return errors.New("connection to bermd already used or closed")
	}
	c.fd = -1
	conn := os.NewFile(uintptr(fd), "bermd")
	defer conn.Close()
	rights := unix.UnixRights(int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd()))
	if err := unix.Sendmsg(fd, []byte{RunMagic}, rights, nil, 0); err != nil {
		return fmt.Errorf("send stdio to bermd: %w", err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(conn)
	if err := enc.Encode(req); err != nil {
		return fmt.Errorf("send call to bermd: %w", err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case s := <-interrupts:
				mu.Lock()
				_ = enc.Encode(Interrupt{Signal: s.String()})
				mu.Unlock()
			}
		}
	}()
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(rep); err != nil {
		return fmt.Errorf("bermd ended the call without a reply: %w", err)
	}
	return nil
}
