package callproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The read request: the trail of the calls, as bermd's journal holds it, for a caller that
// may not read the journal (it is root's): one byte 'Q' (no descriptors), then a ReadRequest
// as one JSON line; bermd answers one ReadReply line. bermd answers only with the calls of
// the tenants the peer may read (bermd --access).

// ReadMagic is the first byte of a read connection.
const ReadMagic = 'Q'

// What a ReadRequest asks for.
const (
	ReadCalls    = "calls"
	ReadTimeline = "timeline"
	// ReadEvents (since 1.2) streams events across calls (`berm events`): one line per event,
	// then an end line; following, until the client closes.
	ReadEvents = "events"
	// ReadApprovals (since 1.2) lists the pending approval requests of the tenants the peer
	// may decide (`berm approvals`).
	ReadApprovals = "approvals"
)

// ReadRequest asks for calls (filtered as `berm calls` filters them), one call's timeline,
// events (filtered as `berm events` filters them) or the pending approvals.
type ReadRequest struct {
	Version string    `json:"version,omitempty"`
	Read    string    `json:"read"` // ReadCalls, ReadTimeline, ReadEvents or ReadApprovals
	Tool    string    `json:"tool,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Call is the timeline's call, or the only call whose events are read: CALL_ID, CALL_KEY
	// or TENANT/CALL_ID.
	Call string `json:"call,omitempty"`
	// Kinds, Setup and Follow are ReadEvents's (since 1.2): only events of these kinds (none:
	// all), also those of berm's own sandbox set-up, and after what is stored wait for new
	// ones until the client closes the connection.
	Kinds  []string `json:"kinds,omitempty"`
	Setup  bool     `json:"setup,omitempty"`
	Follow bool     `json:"follow,omitempty"`
}

// ReadReply is the answer: Calls for ReadCalls (a JSON array of {"start", "record"}, oldest
// first); Call and Events for ReadTimeline; Approvals for ReadApprovals. NoCall is set when no
// such call is known. ReadEvents's answer is a stream of them: one with Event per event,
// then one with End (or Error).
type ReadReply struct {
	Version   string          `json:"version,omitempty"`
	Error     string          `json:"error,omitempty"`
	NoCall    bool            `json:"no_call,omitempty"`
	Calls     json.RawMessage `json:"calls,omitempty"`
	Call      json.RawMessage `json:"call,omitempty"`
	Events    json.RawMessage `json:"events,omitempty"`
	Approvals json.RawMessage `json:"approvals,omitempty"`
	Event     json.RawMessage `json:"event,omitempty"`
	End       bool            `json:"end,omitempty"`
}

// MaxReadRequest bounds a read request's line.
const MaxReadRequest = 64 << 10

// Read asks bermd for calls, a timeline or the pending approvals. An error of bermd's (a
// refusal) is the reply's Error, returned as an error.
func Read(socket string, req *ReadRequest) (*ReadReply, error) {
	conn, err := send(socket, ReadMagic, req)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var rep ReadReply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("bermd ended the read without a reply: %w", err)
	}
	if rep.Error != "" {
		return &rep, errors.New(rep.Error)
	}
	return &rep, nil
}

// send connects, writes the magic byte and req as one JSON line, and returns the connection.
func send(socket string, magic byte, req interface{ setVersion() }) (*os.File, error) {
	fd, err := dial(socket)
	if err != nil {
		return nil, fmt.Errorf("connect to bermd at %s: %w", socket, err)
	}
	conn := os.NewFile(uintptr(fd), "bermd")
	req.setVersion()
	b, err := json.Marshal(req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := unix.Sendmsg(fd, append([]byte{magic}, append(b, '\n')...), nil, nil, 0); err != nil {
		conn.Close()
		return nil, fmt.Errorf("send request to bermd: %w", err)
	}
	return conn, nil
}

func (r *ReadRequest) setVersion() {
	if r.Version == "" {
		r.Version = Version
	}
}

// ErrDropped is a stream of events bermd ended without its end line: it drops a reader that
// stops reading (bermd --reader-stall), and ends every stream when it stops.
var ErrDropped = errors.New("bermd ended the stream of events before its end (a reader that does not keep up is dropped; or bermd stopped)")

// StreamEvents asks bermd for events (req.Read is set to ReadEvents) and calls fn with each
// one's JSON, in order, until the stream's end, an error of fn's, or stop closing (which
// closes the connection: the end of a follow). A refusal is returned as an error.
func StreamEvents(socket string, req *ReadRequest, stop <-chan struct{}, fn func(json.RawMessage) error) error {
	req.Read = ReadEvents
	conn, err := send(socket, ReadMagic, req)
	if err != nil {
		return err
	}
	fd := int(conn.Fd())
	done := make(chan struct{})
	var stopped atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			stopped.Store(true)
			// Shutdown, not Close: the reader below still owns the descriptor.
			_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		case <-done:
		}
	}()
	// The descriptor is closed only once the goroutine that may shut it down is gone.
	defer func() {
		close(done)
		wg.Wait()
		conn.Close()
	}()
	// Line by line: a line bermd could not finish (it dropped a reader that fell behind) is
	// skipped, and the error line after it, if any, says why.
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		b, err := r.ReadBytes('\n')
		if err != nil {
			if stopped.Load() {
				return nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
				return ErrDropped
			}
			return fmt.Errorf("bermd's events: %w", err)
		}
		var line ReadReply
		if json.Unmarshal(b, &line) != nil {
			continue
		}
		switch {
		case line.Error != "":
			return errors.New(line.Error)
		case line.End:
			return nil
		case len(line.Event) > 0:
			if err := fn(line.Event); err != nil {
				return err
			}
		}
	}
}
