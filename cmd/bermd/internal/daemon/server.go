// Package daemon is bermd's control socket: a unix socket over which `berm run` hands bermd
// a tool call (callproto), served to root and, with an access file (bermd --access), to the
// users and groups it names, by tenant (cmd/bermd/internal/access). bermd launches it, with the caller's stdio, from
// sandboxes it keeps warm, traces and records it, and replies with the call record. One
// connection is one call; if the client goes away mid-call, the call is killed and recorded
// as ended by client_lost.
package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/cmd/bermd/internal/access"
	"github.com/bermsec/berm/cmd/internal/runcli"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// DefaultSocket is where bermd listens.
const DefaultSocket = callproto.DefaultSocket

// Server serves the control socket.
type Server struct {
	// Service launches the calls: stdio are the caller's, stops end a call early.
	Service *sandboxer.Service
	Log     *slog.Logger
	// IdleExit, when positive, makes Idle fire once no call has run for that long (a bermd
	// started on demand by `berm run`).
	IdleExit time.Duration
	// Served, when set, hears of every call served, with the times of its phases.
	Served func(Served)
	// Trail answers read requests (callproto.ReadMagic): bermd's journal.
	Trail audit.Source
	// Approvals is bermd's approval broker: its pending requests are listed (a read request)
	// and decided (callproto.DecideMagic) for callers with the decide right. Nil: none.
	Approvals *approval.Broker
	// ReaderStall is how long a reader of a stream of events may leave bermd's writes waiting
	// (it does not read) before bermd drops it; 0 is DefaultReaderStall.
	ReaderStall time.Duration

	access atomic.Pointer[access.File]

	path string
	ino  uint64 // the socket file this server created: only that one is removed at the end
	ln   *net.UnixListener
	wg   sync.WaitGroup
	// connMu orders a connection's wg.Add before Close's wg.Wait: a connection accepted as
	// the listener closes is either counted before the wait or not served.
	connMu    sync.Mutex
	closing   bool
	ctx       context.Context
	cancel    context.CancelFunc
	idle      idleState
	closeOnce sync.Once
}

// Listen creates the socket, readable and writable by root only. A socket a bermd answers on
// is that bermd's: taking it over would leave it serving no one, so Listen refuses.
func (s *Server) Listen(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if callproto.Available(path) {
		return fmt.Errorf("listen on %s: a bermd already serves this socket", path)
	}
	_ = os.Remove(path)
	// The socket file is born root-only: its inode's mode is set before bind, which creates
	// the file with it. Not with umask, which is the whole process's: an init forked by a
	// goroutine meanwhile (the pool warms sandboxes from the start) would keep umask 077 and
	// make the call's directories unreachable for its tool.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.Fchmod(int(fd), 0o600) }); cerr != nil {
			return cerr
		}
		return err
	}}
	l, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	ln := l.(*net.UnixListener)
	// The file is removed by removeSocket, and only while it is still ours: after an idle
	// exit a new bermd may already listen on the same path.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		ln.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	s.path, s.ino, s.ln = path, st.Ino, ln
	if err := s.applySocketACL(); err != nil {
		ln.Close()
		return err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.idle.init(s.IdleExit, callproto.CallerLock(path))
	return nil
}

// removeSocket removes the socket file if it is still the one Listen created.
func (s *Server) removeSocket() {
	var st unix.Stat_t
	if unix.Stat(s.path, &st) == nil && st.Ino == s.ino {
		_ = os.Remove(s.path)
	}
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
		s.connMu.Lock()
		if s.closing {
			s.connMu.Unlock()
			conn.Close()
			return nil
		}
		s.wg.Add(1)
		s.connMu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(conn.(*net.UnixConn))
		}()
	}
}

// Idle is closed once the server has been idle for IdleExit; then Drain, and exit.
func (s *Server) Idle() <-chan struct{} { return s.idle.fired }

// Drain stops accepting and waits for the calls in flight to end on their own: the end of a
// bermd that exits when idle.
func (s *Server) Drain() {
	s.stopListening()
	s.wg.Wait()
	s.idle.release()
}

// Close stops accepting, interrupts the calls in flight and waits for their records.
func (s *Server) Close() error {
	err := s.stopListening()
	s.cancel()
	s.wg.Wait()
	s.idle.release()
	return err
}

func (s *Server) stopListening() error {
	var err error
	s.connMu.Lock()
	s.closing = true
	s.connMu.Unlock()
	s.closeOnce.Do(func() {
		s.removeSocket()
		err = s.ln.Close()
	})
	return err
}

// peerUID is the connection's peer uid as the kernel gives it (SO_PEERCRED).
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	if cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

func (s *Server) handle(conn *net.UnixConn) {
	sv := Served{Accepted: time.Now()}
	sv.Timeline = sandboxer.NewTimeline(sv.Accepted)
	s.idle.begin()
	defer s.idle.end()
	defer conn.Close()
	enc := json.NewEncoder(conn)
	refuse := func(format string, args ...any) {
		_ = enc.Encode(callproto.Reply{Version: callproto.Version, Error: fmt.Sprintf(format, args...), ExitStatus: 125})
	}
	acc := s.Access()
	uid, err := peerUID(conn)
	if err != nil {
		refuse("bermd: the peer's credentials: %v", err)
		return
	}
	peer := access.Peer{UID: uid}
	if uid != 0 {
		peer = access.PeerOf(uid)
	}
	if !acc.Known(peer) {
		if acc == access.RootOnly {
			refuse("bermd serves root only (bermd --access names who else it serves)")
		} else {
			refuse("bermd: uid %d is named in no tenant of its access file %s", uid, acc.Path)
		}
		return
	}
	magic, stdio, cwd, err := readStdio(conn)
	if err != nil {
		if !errors.Is(err, io.EOF) { // a probe that only connects is not an error
			refuse("%v", err)
		}
		return
	}
	defer func() {
		for _, f := range stdio {
			f.Close()
		}
		if cwd != nil {
			cwd.Close()
		}
	}()
	br := bufio.NewReader(conn)
	switch magic {
	case callproto.InvokeMagic:
		s.invoke(conn, br, stdio, cwd, peer, acc, &sv)
		return
	case callproto.ReadMagic:
		s.read(conn, br, peer, acc)
		return
	case callproto.DecideMagic:
		s.decide(conn, br, peer, acc)
		return
	}
	dec := json.NewDecoder(br)
	var req callproto.Request
	if err := dec.Decode(&req); err != nil {
		refuse("read run request: %v", err)
		return
	}
	if err := callproto.CheckVersion(req.Version); err != nil {
		refuse("bermd: %v", err)
		return
	}
	sv.Request = time.Now()
	sv.Timeline.Mark("request read")
	if req.CallID == "" {
		req.CallID = newCallID()
		setEnv(req.Env, "BERM_CALL_ID", req.CallID)
	}
	fresh := false
	if req.Workspace == "" {
		// The protocol's fresh workspace: made for this call, removed after it.
		if err := sandboxer.ValidName("call_id", req.CallID); err != nil {
			refuse("%v", err)
			return
		}
		ws, rm, err := runcli.FreshWorkspace(req.CallID)
		defer rm()
		if err != nil {
			refuse("%v", err)
			return
		}
		req.Workspace, fresh = ws, true
		setEnv(req.Env, "HOME", ws)
	}
	check, err := s.authorizeRun(peer, acc, &req, fresh)
	if err != nil {
		refuse("%v", err)
		return
	}
	sv.Timeline.Mark("access check")
	rep := s.launch(dec, &req, stdio, check, sv.Timeline)
	sv.Launched = time.Now()
	_ = enc.Encode(rep)
	s.served(&sv, &req, &rep)
}

// invoke serves a bare invocation: bermd reads its flags as berm run would (the one parser,
// runcli.Invoke, which the C front does not link), launches the call it
// describes and answers in frames.
func (s *Server) invoke(conn *net.UnixConn, br *bufio.Reader, stdio [3]*os.File, cwd *os.File, peer access.Peer, acc *access.File, sv *Served) {
	args, env, err := callproto.ReadInvocation(br)
	if err != nil {
		_ = callproto.WriteEndFrame(conn, callproto.FrontEnd{Status: 1, Stderr: fmt.Appendf(nil, "berm: bermd: %v\n", err)})
		return
	}
	sv.Request = time.Now()
	sv.Timeline.Mark("request read")
	inv := &callproto.Invocation{Args: args, Env: env, Cwd: cwd}
	if !peer.Root() {
		inv.NonRoot = true
		inv.DefaultTenant, _ = acc.RunTenant(peer, "")
	}
	fc := runcli.Invoke(inv, s.ownSocket)
	sv.Timeline.Mark("flags parsed")
	// The workspace made for the call is gone before the front hears of its end, as the Go
	// front removes it before it exits.
	cleanup := func() {
		if fc.Cleanup != nil {
			fc.Cleanup()
			fc.Cleanup = nil
		}
	}
	defer cleanup()
	if fc.Fallback {
		_ = callproto.WriteFallbackFrame(conn)
		return
	}
	if len(fc.Early) > 0 {
		if err := callproto.WriteStderrFrame(conn, fc.Early); err != nil {
			return
		}
	}
	if fc.Request == nil {
		_ = callproto.WriteEndFrame(conn, fc.End)
		return
	}
	check, err := s.authorizeRun(peer, acc, fc.Request, fc.FreshWorkspace)
	if err != nil {
		_ = callproto.WriteEndFrame(conn, callproto.FrontEnd{Status: 1, Stderr: fmt.Appendf(nil, "berm: bermd: %v\n", err)})
		return
	}
	sv.Timeline.Mark("access check")
	rep := s.launch(json.NewDecoder(br), fc.Request, stdio, check, sv.Timeline)
	sv.Launched = time.Now()
	end := fc.Finish(rep)
	cleanup()
	_ = callproto.WriteEndFrame(conn, end)
	s.served(sv, fc.Request, &rep)
}

// ownSocket says whether path is the socket this server listens on.
func (s *Server) ownSocket(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil && st.Ino == s.ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// launch runs a call to its end; whatever the client sends while it runs (decoded by dec)
// is an interrupt, its going away is one too.
func (s *Server) launch(dec *json.Decoder, req *callproto.Request, stdio [3]*os.File, checkWorkspace func(int) error, tl *sandboxer.Timeline) callproto.Reply {
	stops := make(chan callproto.Stop, 4)
	done := make(chan struct{})
	defer close(done)
	send := func(st callproto.Stop) {
		select {
		case stops <- st:
		case <-done:
		}
	}
	go func() {
		for {
			var in callproto.ClientLine
			if err := dec.Decode(&in); err != nil {
				send(callproto.Stop{Reason: event.EndClientLost, Detail: fmt.Sprintf("client connection lost: %v", err)})
				return
			}
			if in.MCP != nil {
				send(callproto.Stop{MCP: in.MCP})
				continue
			}
			send(callproto.Stop{Reason: event.EndInterrupted, Detail: "berm run received " + in.Signal})
		}
	}()
	go func() {
		select {
		case <-s.ctx.Done():
			send(callproto.Stop{Reason: event.EndInterrupted, Detail: "bermd is stopping"})
		case <-done:
		}
	}()
	rep := s.Service.LaunchTimed(req, stdio, stops, checkWorkspace, tl)
	rep.Version = callproto.Version
	if rep.Record != nil && rep.Record.EndReason == event.EndClientLost {
		s.Log.Warn("call client lost", "call_id", rep.Record.CallID, "detail", rep.Record.EndDetail)
	}
	return rep
}

func (s *Server) served(sv *Served, req *callproto.Request, rep *callproto.Reply) {
	sv.Replied = time.Now()
	sv.Timeline.Mark("reply")
	if s.Served != nil {
		sv.CallID, sv.Record = req.CallID, rep.Record
		s.Served(*sv)
	}
}

// readStdio reads the magic byte and the caller's stdin, stdout and stderr passed with it;
// a bare invocation (callproto.InvokeMagic) also passes its working directory.
func readStdio(conn *net.UnixConn) (magic byte, stdio [3]*os.File, cwd *os.File, err error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, stdio, nil, err
	}
	if n == 0 {
		return 0, stdio, nil, io.EOF
	}
	var fds []int
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	want := 3
	switch buf[0] {
	case callproto.InvokeMagic:
		want = 4
	case callproto.ReadMagic, callproto.DecideMagic:
		want = 0
	}
	known := buf[0] == callproto.RunMagic || buf[0] == callproto.InvokeMagic || buf[0] == callproto.ReadMagic || buf[0] == callproto.DecideMagic
	if !known || len(fds) != want || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0, stdio, nil, fmt.Errorf("expected a run request with stdin, stdout and stderr (berm and bermd from different versions?)")
	}
	if want == 0 {
		return buf[0], stdio, nil, nil
	}
	for i, name := range []string{"stdin", "stdout", "stderr"} {
		unix.CloseOnExec(fds[i])
		stdio[i] = os.NewFile(uintptr(fds[i]), "caller-"+name)
	}
	if want == 4 {
		unix.CloseOnExec(fds[3])
		cwd = os.NewFile(uintptr(fds[3]), "caller-cwd")
	}
	return buf[0], stdio, cwd, nil
}
