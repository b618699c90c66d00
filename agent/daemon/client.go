package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/policy"
)

// Client records calls through bermd. It satisfies sandboxer.Recorder.
type Client struct {
	Socket string
	// CgroupRoot lets the daemon find a call's cgroup directory to kill if the client dies.
	CgroupDir func(start event.CallStart) string
}

// Available reports whether a daemon answers on the socket.
func Available(socket string) bool {
	c, err := net.DialTimeout("unix", socket, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

type clientCall struct {
	mu   sync.Mutex
	conn net.Conn
	enc  *json.Encoder
	dec  *json.Decoder
}

// Begin opens a connection for the call and registers it.
func (c *Client) Begin(start event.CallStart, opts agent.CallOptions) (*clientCall, error) {
	conn, err := net.DialTimeout("unix", c.Socket, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("connect to bermd at %s: %w", c.Socket, err)
	}
	cc := &clientCall{conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(bufio.NewReader(conn))}
	req := request{Op: "begin", Start: &start, Opts: opts}
	if c.CgroupDir != nil {
		req.Cgroup = filepath.Clean(c.CgroupDir(start))
	}
	if err := cc.enc.Encode(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bermd begin: %w", err)
	}
	var resp response
	if err := cc.dec.Decode(&resp); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bermd begin: %w", err)
	}
	if resp.Error != "" {
		conn.Close()
		return nil, fmt.Errorf("bermd begin: %s", resp.Error)
	}
	return cc, nil
}

func (cc *clientCall) Emit(ev event.Event) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	_ = cc.enc.Encode(request{Op: "emit", Event: &ev})
}

func (cc *clientCall) UpdateNetwork(pol *policy.NetPolicy) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if err := cc.enc.Encode(request{Op: "net", Net: pol}); err != nil {
		return fmt.Errorf("bermd net: %w", err)
	}
	var resp response
	if err := cc.dec.Decode(&resp); err != nil {
		return fmt.Errorf("bermd net: %w", err)
	}
	if resp.Error != "" {
		return errors.New("bermd net: " + resp.Error)
	}
	return nil
}

func (cc *clientCall) End(res agent.Result) (*event.CallRecord, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	defer cc.conn.Close()
	if err := cc.enc.Encode(request{Op: "end", Result: &res}); err != nil {
		return nil, fmt.Errorf("bermd end: %w", err)
	}
	var resp response
	if err := cc.dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("bermd end: %w", err)
	}
	var err error
	if resp.Error != "" {
		err = errors.New("bermd end: " + resp.Error)
	}
	return resp.Record, err
}
