package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/cgroup"
)

// Server serves the control socket.
type Server struct {
	Agent *agent.Agent
	Log   *slog.Logger

	ln net.Listener
	wg sync.WaitGroup
}

// Listen creates the socket, readable and writable by root only.
func (s *Server) Listen(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	_ = os.Remove(path)
	old := unix.Umask(0o077)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	s.ln = ln
	return nil
}

// Serve accepts connections until Close.
func (s *Server) Serve() error {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(conn.(*net.UnixConn))
		}()
	}
}

// Close stops accepting and waits for the calls in flight.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func peerIsRoot(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return err == nil && cred != nil && cred.Uid == 0
}

func (s *Server) handle(conn *net.UnixConn) {
	defer conn.Close()
	enc := json.NewEncoder(conn)
	if !peerIsRoot(conn) {
		_ = enc.Encode(response{Error: "bermd serves root only"})
		return
	}
	dec := json.NewDecoder(bufio.NewReader(conn))
	var call *agent.Call
	var cgroupDir string
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if call != nil {
				s.lost(call, cgroupDir, err)
			}
			return
		}
		switch req.Op {
		case "begin":
			if call != nil || req.Start == nil {
				_ = enc.Encode(response{Error: "begin: one call per connection, with a start"})
				return
			}
			c, err := s.Agent.Begin(*req.Start, req.Opts)
			if err != nil {
				_ = enc.Encode(response{Error: err.Error()})
				return
			}
			call, cgroupDir = c, req.Cgroup
			_ = enc.Encode(response{})
		case "net":
			if call == nil || req.Net == nil {
				_ = enc.Encode(response{Error: "net: no call begun"})
				return
			}
			resp := response{}
			if err := s.Agent.UpdateNetwork(call, req.Net); err != nil {
				resp.Error = err.Error()
			}
			_ = enc.Encode(resp)
		case "emit":
			if call != nil && req.Event != nil {
				s.Agent.Emit(call, *req.Event)
			}
		case "end":
			if call == nil || req.Result == nil {
				_ = enc.Encode(response{Error: "end: no call begun"})
				return
			}
			rec, err := s.Agent.End(call, *req.Result)
			call = nil
			resp := response{Record: rec}
			if err != nil {
				resp.Error = err.Error()
			}
			_ = enc.Encode(resp)
			return
		default:
			_ = enc.Encode(response{Error: fmt.Sprintf("unknown op %q", req.Op)})
			return
		}
	}
}

// lost ends a call whose client went away: kill everything in its cgroup first, so nothing
// of the call outlives the record that says it ended.
func (s *Server) lost(call *agent.Call, cgroupDir string, cause error) {
	detail := fmt.Sprintf("client connection lost: %v", cause)
	if cgroupDir != "" {
		if err := cgroup.KillAndWait(cgroupDir, 5*time.Second); err != nil {
			s.Log.Error("kill lost call", "call_id", call.Start.CallID, "err", err)
		}
	}
	if _, err := s.Agent.End(call, agent.Result{Reason: event.EndClientLost, Detail: detail, ExitStatus: 137}); err != nil {
		s.Log.Error("end lost call", "call_id", call.Start.CallID, "err", err)
	}
	s.Log.Warn("call client lost", "call_id", call.Start.CallID, "cause", cause)
}
