package callproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
)

// ReadRequest asks for calls (filtered as `berm calls` filters them) or one call's timeline.
type ReadRequest struct {
	Version string    `json:"version,omitempty"`
	Read    string    `json:"read"` // ReadCalls or ReadTimeline
	Tool    string    `json:"tool,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Call is the timeline's call: CALL_ID, CALL_KEY or TENANT/CALL_ID.
	Call string `json:"call,omitempty"`
}

// ReadReply is the answer: Calls for ReadCalls (a JSON array of {"start", "record"}, oldest
// first); Call and Events for ReadTimeline. NoCall is set when no such call is known.
type ReadReply struct {
	Version string          `json:"version,omitempty"`
	Error   string          `json:"error,omitempty"`
	NoCall  bool            `json:"no_call,omitempty"`
	Calls   json.RawMessage `json:"calls,omitempty"`
	Call    json.RawMessage `json:"call,omitempty"`
	Events  json.RawMessage `json:"events,omitempty"`
}

// MaxReadRequest bounds a read request's line.
const MaxReadRequest = 64 << 10

// Read asks bermd for calls or a timeline. An error of bermd's (a refusal) is the reply's
// Error, returned as an error.
func Read(socket string, req *ReadRequest) (*ReadReply, error) {
	fd, err := dial(socket)
	if err != nil {
		return nil, fmt.Errorf("connect to bermd at %s: %w", socket, err)
	}
	conn := os.NewFile(uintptr(fd), "bermd")
	defer conn.Close()
	if req.Version == "" {
		req.Version = Version
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := unix.Sendmsg(fd, append([]byte{ReadMagic}, append(b, '\n')...), nil, nil, 0); err != nil {
		return nil, fmt.Errorf("send read request to bermd: %w", err)
	}
	var rep ReadReply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("bermd ended the read without a reply: %w", err)
	}
	if rep.Error != "" {
		return &rep, errors.New(rep.Error)
	}
	return &rep, nil
}
