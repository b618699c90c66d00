package daemon

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/cmd/bermd/internal/access"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Access is who the server serves: the access file last set, or root only.
func (s *Server) Access() *access.File {
	if f := s.access.Load(); f != nil {
		return f
	}
	return access.RootOnly
}

// SetAccess replaces who the server serves (bermd --access, reloaded on SIGHUP): the
// connections accepted from then on are decided by f, and the socket is reachable by the users
// and groups f names. nil is root only.
func (s *Server) SetAccess(f *access.File) error {
	if f == nil {
		f = access.RootOnly
	}
	s.access.Store(f)
	if s.path == "" {
		return nil // Listen applies it
	}
	return s.applySocketACL()
}

// applySocketACL makes the socket reachable (connect needs write) by root and the users and
// groups the access file names, and by no one else: a POSIX ACL on the socket file, mode
// 0600 otherwise. Not a `berm` group to keep in step with the file by hand: the ACL is the
// file's own list, rewritten at every reload. bermd decides every connection anyway (the
// socket's mode is a first filter, not the check).
func (s *Server) applySocketACL() error {
	f := s.Access()
	if len(f.UIDs) == 0 && len(f.GIDs) == 0 {
		if err := unix.Removexattr(s.path, "system.posix_acl_access"); err != nil && !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("socket %s: remove its acl: %w", s.path, err)
		}
		return os.Chmod(s.path, 0o600)
	}
	if err := unix.Setxattr(s.path, "system.posix_acl_access", socketACL(f.UIDs, f.GIDs), 0); err != nil {
		return fmt.Errorf("socket %s: let the users of the access file reach it (a POSIX ACL; the file system must support them): %w", s.path, err)
	}
	return nil
}

// socketACL is the posix_acl_xattr value: owner rw, each user and group rw, no one else.
func socketACL(uids, gids []uint32) []byte {
	const (
		userObj, user, groupObj, group, mask, other = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
		rw, none, undefined                         = 6, 0, 0xffffffff
	)
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 2) // POSIX_ACL_XATTR_VERSION
	entry := func(tag, perm uint16, id uint32) {
		b = le.AppendUint16(b, tag)
		b = le.AppendUint16(b, perm)
		b = le.AppendUint32(b, id)
	}
	entry(userObj, rw, undefined)
	for _, u := range slices.Sorted(slices.Values(uids)) {
		if u != 0 {
			entry(user, rw, u)
		}
	}
	entry(groupObj, none, undefined)
	for _, g := range slices.Sorted(slices.Values(gids)) {
		entry(group, rw, g)
	}
	entry(mask, rw, undefined)
	entry(other, none, undefined)
	return b
}

// authorizeRun decides a run request of a peer that is not root, completing it where the
// protocol leaves it to bermd (the tenant): run right in the tenant, a policy the tenant
// lists, caps no looser than the policy's, and (returned, for the launcher to ask on the
// workspace it holds open) a workspace of the peer's own. fresh: the workspace is one bermd
// made for the call.
func (s *Server) authorizeRun(peer access.Peer, acc *access.File, req *callproto.Request, fresh bool) (func(int) error, error) {
	if peer.Root() {
		if req.Tenant == "" {
			req.Tenant = "default"
			setEnv(req.Env, "BERM_TENANT", req.Tenant)
		}
		return nil, nil
	}
	if req.Tenant == "" {
		t, err := acc.RunTenant(peer, "")
		if err != nil {
			return nil, err
		}
		req.Tenant = t
		setEnv(req.Env, "BERM_TENANT", t)
	}
	if err := acc.Run(peer, req.Tenant, req.PolicyFile); err != nil {
		return nil, err
	}
	if err := capsWithin(req); err != nil {
		return nil, &access.Refusal{UID: peer.UID, Tenant: req.Tenant, Right: access.Run, Detail: err.Error()}
	}
	if req.DNSUpstream != "" {
		// bermd (root, on the host's network) sends the call's allowed queries there: a
		// caller choosing it would choose where root's packets go.
		return nil, &access.Refusal{UID: peer.UID, Tenant: req.Tenant, Right: access.Run, Detail: "only root names the call's DNS upstream (--dns-upstream)"}
	}
	if fresh {
		return nil, nil
	}
	return func(fd int) error { return ownWorkspace(fd, peer) }, nil
}

// capsWithin refuses caps given as flags that are looser than the policy's: a caller that is
// not root may tighten them, never loosen them.
func capsWithin(req *callproto.Request) error {
	var def event.Limits
	if _, err := sandboxer.LoadPolicy(req.PolicyFile, &def, nil); err != nil {
		return err
	}
	l := req.Limits
	for _, f := range req.Explicit {
		var over bool
		switch f {
		case "memory":
			over = l.MemoryBytes > def.MemoryBytes
		case "pids":
			over = l.Pids > def.Pids
		case "output-limit":
			over = l.OutputBytes > def.OutputBytes
		case "tmp-size":
			over = l.TmpBytes > def.TmpBytes
		case "cpus":
			over = l.CPUs > def.CPUs
		case "timeout":
			over = l.WallTime > def.WallTime
		}
		if over {
			return fmt.Errorf("--%s above the policy's cap: only root loosens a policy's caps", f)
		}
	}
	return nil
}

// ownWorkspace checks the workspace, as the launcher holds it, is the peer's own directory:
// the tool runs as the workspace's owner, so a directory the peer can merely write (a shared
// one, /tmp) would run it as someone else.
func ownWorkspace(fd int, peer access.Peer) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Uid != peer.UID {
		return fmt.Errorf("owned by uid %d, not by the caller (uid %d): a caller that is not root names a workspace of its own (the tool runs as the workspace's owner)", st.Uid, peer.UID)
	}
	return nil
}

// setEnv sets NAME's value in env where it is empty (the entry callEnv writes before bermd
// knows the value).
func setEnv(env []string, name, value string) {
	for i, e := range env {
		if e == name+"=" {
			env[i] = name + "=" + value
		}
	}
}

func newCallID() string {
	b := make([]byte, 4)
	_, _ = unix.Getrandom(b, 0)
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

// read answers a read request with the calls of the tenants the peer may read.
func (s *Server) read(conn *net.UnixConn, br *bufio.Reader, peer access.Peer, acc *access.File) {
	enc := json.NewEncoder(conn)
	answer := func(rep callproto.ReadReply) {
		rep.Version = callproto.Version
		// A reader that does not read its answer holds only its own connection, for a while.
		_ = conn.SetWriteDeadline(time.Now().Add(s.readerStall()))
		_ = enc.Encode(rep)
	}
	fail := func(err error) { answer(callproto.ReadReply{Error: err.Error()}) }
	var rq callproto.ReadRequest
	if err := json.NewDecoder(io.LimitReader(br, callproto.MaxReadRequest)).Decode(&rq); err != nil {
		if !errors.Is(err, io.EOF) {
			fail(fmt.Errorf("read request: %w", err))
		}
		return
	}
	if err := callproto.CheckVersion(rq.Version); err != nil {
		fail(err)
		return
	}
	if rq.Read == callproto.ReadApprovals {
		rep, err := s.pendingApprovals(peer, acc, rq.Tenant)
		if err != nil {
			fail(err)
			return
		}
		answer(rep)
		return
	}
	if s.Trail == nil {
		fail(errors.New("this bermd keeps no trail to read"))
		return
	}
	readable := func(tenant string) bool { return acc.Check(peer, tenant, access.Read) == nil }
	switch rq.Read {
	case callproto.ReadEvents:
		s.events(conn, br, &rq, peer)
	case callproto.ReadCalls:
		if rq.Tenant != "" && !readable(rq.Tenant) {
			fail(acc.Check(peer, rq.Tenant, access.Read))
			return
		}
		if !peer.Root() && len(acc.TenantsWith(peer, access.Read)) == 0 {
			fail(&access.Refusal{UID: peer.UID, Right: access.Read, Detail: "no tenant grants it read"})
			return
		}
		calls, err := s.Trail.Calls(audit.Filter{Tool: rq.Tool, Tenant: rq.Tenant, Since: rq.Since})
		if err != nil {
			fail(err)
			return
		}
		calls = slices.DeleteFunc(calls, func(c audit.Call) bool { return !readable(c.Start.Tenant) })
		if calls == nil {
			calls = []audit.Call{}
		}
		b, err := json.Marshal(calls)
		if err != nil {
			fail(err)
			return
		}
		answer(callproto.ReadReply{Calls: b})
	case callproto.ReadTimeline:
		if t, _, ok := strings.Cut(rq.Call, "/"); ok && !readable(t) {
			fail(acc.Check(peer, t, access.Read))
			return
		}
		id := rq.Call
		if !peer.Root() {
			// Resolved among the calls the peer may read: an id other tenants' calls have
			// too names the peer's own, and the ambiguity of one its tenants share lists
			// only their keys (never another tenant's).
			var err error
			if id, err = s.readableCall(rq.Call, peer, acc); err != nil {
				var nc noCall
				if errors.As(err, &nc) {
					answer(callproto.ReadReply{NoCall: true, Error: err.Error()})
					return
				}
				fail(err)
				return
			}
		}
		call, evs, err := s.Trail.Timeline(id)
		if errors.Is(err, audit.ErrNoCall) {
			answer(callproto.ReadReply{NoCall: true, Error: fmt.Sprintf("no call %q", rq.Call)})
			return
		}
		if err != nil {
			fail(err)
			return
		}
		if !readable(call.Start.Tenant) {
			fail(acc.Check(peer, call.Start.Tenant, access.Read))
			return
		}
		cb, err := json.Marshal(call)
		if err != nil {
			fail(err)
			return
		}
		eb, err := json.Marshal(evs)
		if err != nil {
			fail(err)
			return
		}
		answer(callproto.ReadReply{Call: cb, Events: eb})
	default:
		fail(fmt.Errorf("read request: expected read %q, %q, %q or %q, got %q", callproto.ReadCalls, callproto.ReadTimeline, callproto.ReadEvents, callproto.ReadApprovals, rq.Read))
	}
}

// noCall is a timeline of a call id nobody has.
type noCall string

func (n noCall) Error() string { return fmt.Sprintf("no call %q", string(n)) }

// readableCall is the key of the one call id names among the calls of the tenants the peer
// may read. An id only other tenants' calls have is refused naming the tenant and the right
// (as a TENANT/ID of theirs is).
func (s *Server) readableCall(id string, peer access.Peer, acc *access.File) (string, error) {
	readable := func(tenant string) bool { return acc.Check(peer, tenant, access.Read) == nil }
	calls, err := s.Trail.Calls(audit.Filter{})
	if err != nil {
		return "", err
	}
	var keys []string
	other := ""
	for _, c := range calls {
		st := c.Start
		if st.CallKey != id && st.CallID != id && st.Tenant+"/"+st.CallID != id {
			continue
		}
		if readable(st.Tenant) {
			if !slices.Contains(keys, st.Key()) {
				keys = append(keys, st.Key())
			}
		} else if other == "" {
			other = st.Tenant
		}
	}
	switch {
	case len(keys) == 1:
		return keys[0], nil
	case len(keys) > 1:
		return "", fmt.Errorf("call %q: %w (call keys %s): name one by its key or as TENANT/ID", id, audit.ErrAmbiguous, strings.Join(keys, ", "))
	case other != "":
		return "", acc.Check(peer, other, access.Read)
	}
	return "", noCall(id)
}
