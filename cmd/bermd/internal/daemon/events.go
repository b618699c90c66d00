package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/cmd/bermd/internal/access"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// events streams the events of the tenants the peer may read (berm events): one line per
// event, then an end line; following, until the client closes or bermd stops. Each event's
// tenant is checked against the access in force when it is sent (a reload that takes the
// read right away stops the stream's events of that tenant); another tenant's events, their
// call ids included, never reach the peer.
//
// What bermd holds for a reader is bounded: a 64 KiB buffer and the socket's. A reader that
// leaves a write waiting for ReaderStall (it does not read) is dropped: its stream ends (with
// an error line if one still fits), the journal is no longer read for it, and nothing else
// waited on it.
func (s *Server) events(conn *net.UnixConn, br *bufio.Reader, rq *callproto.ReadRequest, peer access.Peer) {
	stall := s.readerStall()
	bw := bufio.NewWriterSize(conn, 64<<10)
	line := func(rep callproto.ReadReply) error {
		rep.Version = callproto.Version
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_ = conn.SetWriteDeadline(time.Now().Add(stall))
		if _, err := bw.Write(append(b, '\n')); err != nil {
			return err
		}
		return bw.Flush()
	}
	fail := func(err error) { _ = line(callproto.ReadReply{Error: err.Error()}) }
	es, ok := s.Trail.(audit.EventSource)
	if !ok {
		fail(errors.New("this bermd's trail cannot stream events"))
		return
	}
	acc := s.Access()
	if !peer.Root() && len(acc.TenantsWith(peer, access.Read)) == 0 {
		fail(&access.Refusal{UID: peer.UID, Right: access.Read, Detail: "no tenant grants it read"})
		return
	}
	if rq.Tenant != "" {
		if err := acc.Check(peer, rq.Tenant, access.Read); err != nil {
			fail(err)
			return
		}
	}
	if t, _, ok := strings.Cut(rq.Call, "/"); ok {
		if err := acc.Check(peer, t, access.Read); err != nil {
			fail(err)
			return
		}
	}
	f := audit.EventFilter{Since: rq.Since, Call: rq.Call, Tenant: rq.Tenant, Tool: rq.Tool, Setup: rq.Setup}
	for _, k := range rq.Kinds {
		if !slices.Contains(event.Kinds, event.Kind(k)) {
			fail(fmt.Errorf("events: unknown kind %q", k))
			return
		}
		f.Kinds = append(f.Kinds, event.Kind(k))
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	if rq.Follow {
		// The client sends nothing more: its end of the connection (or anything it sends,
		// read and dropped) is the end of the follow.
		go func() {
			_, _ = io.Copy(io.Discard, br)
			cancel()
		}()
	}
	go func() {
		// A write waiting on the client ends at once when the stream does (bermd stopping).
		<-ctx.Done()
		_ = conn.SetWriteDeadline(time.Now())
	}()
	flushEach := rq.Follow
	err := es.Events(ctx, f, rq.Follow, func(e event.Event) error {
		if s.Access().Check(peer, e.Tenant, access.Read) != nil {
			return nil
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_ = conn.SetWriteDeadline(time.Now().Add(stall))
		bw.WriteString(`{"event":`)
		bw.Write(b)
		if _, err := bw.WriteString("}\n"); err != nil {
			return err
		}
		if flushEach {
			return bw.Flush()
		}
		return nil
	})
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		// The client closed (a follow's end) or bermd is stopping: nobody reads an end.
	case errors.As(err, &ne) && ne.Timeout():
		s.Log.Warn("events reader dropped: it did not read", "uid", peer.UID, "stall", stall)
		// One last line, if the socket still has room for it.
		bw.Reset(conn)
		_ = conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		b, _ := json.Marshal(callproto.ReadReply{Version: callproto.Version, Error: fmt.Sprintf("bermd dropped this reader: it did not read for %s", stall)})
		// After a newline: the write that timed out may have left a line unfinished.
		_, _ = conn.Write(append(append([]byte{'\n'}, b...), '\n'))
	case err != nil:
		fail(err)
	default:
		_ = line(callproto.ReadReply{End: true})
	}
}
