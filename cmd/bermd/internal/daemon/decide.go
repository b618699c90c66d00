package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/bermsec/berm/cmd/bermd/internal/access"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// decidable is the test of the decide right in a tenant, and the refusal of a peer that has
// it in no tenant at all (nil for one that has it somewhere, and for root).
func decidable(peer access.Peer, acc *access.File) (func(string) bool, error) {
	if !peer.Root() && len(acc.TenantsWith(peer, access.Decide)) == 0 {
		return nil, &access.Refusal{UID: peer.UID, Right: access.Decide, Detail: "no tenant grants it decide"}
	}
	return func(tenant string) bool { return acc.Check(peer, tenant, access.Decide) == nil }, nil
}

// pendingApprovals answers a read of the pending approvals: those of the tenants the peer may
// decide (of tenant only, when named), the others left out as if they did not exist.
func (s *Server) pendingApprovals(peer access.Peer, acc *access.File, tenant string) (callproto.ReadReply, error) {
	ok, err := decidable(peer, acc)
	if err != nil {
		return callproto.ReadReply{}, err
	}
	if tenant != "" && !ok(tenant) {
		return callproto.ReadReply{}, acc.Check(peer, tenant, access.Decide)
	}
	out := []approval.PendingView{}
	if s.Approvals != nil {
		now := time.Now()
		for _, p := range s.Approvals.List() {
			if ok(p.Tenant) && (tenant == "" || p.Tenant == tenant) {
				out = append(out, approval.PendingView{Request: p, AgeSeconds: p.Age(now).Seconds()})
			}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return callproto.ReadReply{}, err
	}
	return callproto.ReadReply{Approvals: b}, nil
}

// decide answers a decide request: approve or deny one pending approval request. The tenant is
// the pending request's own; the peer needs the decide right in it. A request of a tenant the
// peer may not decide is answered as one that does not exist (nothing of another tenant's,
// not even that it has a request waiting, reaches the peer); bermd logs the attempt.
func (s *Server) decide(conn *net.UnixConn, br *bufio.Reader, peer access.Peer, acc *access.File) {
	enc := json.NewEncoder(conn)
	answer := func(rep callproto.DecideReply) {
		rep.Version = callproto.Version
		_ = conn.SetWriteDeadline(time.Now().Add(s.readerStall()))
		_ = enc.Encode(rep)
	}
	fail := func(err error) { answer(callproto.DecideReply{Error: err.Error()}) }
	var rq callproto.DecideRequest
	if err := json.NewDecoder(io.LimitReader(br, callproto.MaxReadRequest)).Decode(&rq); err != nil {
		if !errors.Is(err, io.EOF) {
			fail(fmt.Errorf("decide request: %w", err))
		}
		return
	}
	if err := callproto.CheckVersion(rq.Version); err != nil {
		fail(err)
		return
	}
	if rq.Decision != callproto.Approve && rq.Decision != callproto.Deny {
		fail(fmt.Errorf("decide request: decision: expected %q or %q, got %q", callproto.Approve, callproto.Deny, rq.Decision))
		return
	}
	ok, err := decidable(peer, acc)
	if err != nil {
		fail(err)
		return
	}
	if s.Approvals == nil {
		fail(fmt.Errorf("approval %s: %w", approval.EscapeControls(rq.ID), approval.ErrUnknown))
		return
	}
	tenant, pending := s.Approvals.TenantOf(rq.ID)
	if !pending || !ok(tenant) {
		if pending {
			s.Log.Warn("approval decision refused: the caller has no decide right in the request's tenant", "uid", peer.UID, "id", rq.ID, "tenant", tenant)
		}
		scope := ""
		if !peer.Root() {
			scope = fmt.Sprintf(" in the tenants uid %d may decide (%s)", peer.UID, strings.Join(acc.TenantsWith(peer, access.Decide), ", "))
		}
		fail(fmt.Errorf("approval %s: %w%s", approval.EscapeControls(rq.ID), approval.ErrUnknown, scope))
		return
	}
	by := s.Approvals.Decider(int(peer.UID))
	if err := s.Approvals.Decide(rq.ID, rq.Decision == callproto.Approve, by, approval.ChannelAPI, rq.Reason); err != nil {
		fail(err)
		return
	}
	answer(callproto.DecideReply{By: by})
}

// DefaultReaderStall is how long bermd waits on a reader that does not read what it asked
// for before it drops it.
const DefaultReaderStall = 30 * time.Second

func (s *Server) readerStall() time.Duration {
	if s.ReaderStall > 0 {
		return s.ReaderStall
	}
	return DefaultReaderStall
}
