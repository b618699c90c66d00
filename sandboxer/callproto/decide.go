package callproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
)

// The decide request (since 1.2): an answer to a pending approval request, for `berm approve`
// and `berm deny` of a caller that is not root. One byte 'D' (no descriptors), then a
// DecideRequest as one JSON line; bermd answers one DecideReply line. bermd decides who the
// caller is from the connection (SO_PEERCRED) and takes the tenant from the pending request
// itself: the caller needs the decide right in it (bermd --access).

// DecideMagic is the first byte of a decide connection.
const DecideMagic = 'D'

// Decisions a DecideRequest makes.
const (
	Approve = "approve"
	Deny    = "deny"
)

// DecideRequest answers the pending approval request ID.
type DecideRequest struct {
	Version  string `json:"version,omitempty"`
	ID       string `json:"id"`
	Decision string `json:"decision"` // Approve or Deny
	Reason   string `json:"reason,omitempty"`
}

func (r *DecideRequest) setVersion() {
	if r.Version == "" {
		r.Version = Version
	}
}

// DecideReply says the decision was taken (Error empty), and by whom it is recorded.
type DecideReply struct {
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	By      string `json:"by,omitempty"`
}

// Decide sends a decision to bermd. A refusal is the reply's Error, returned as an error.
func Decide(socket string, req *DecideRequest) (*DecideReply, error) {
	conn, err := send(socket, DecideMagic, req)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var rep DecideReply
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("bermd ended the decision without a reply: %w", err)
	}
	if rep.Error != "" {
		return &rep, errors.New(rep.Error)
	}
	return &rep, nil
}
