package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/cmd/bermd/internal/daemon"
	"github.com/bermsec/berm/sandboxer/approval"
)

// startApprovals makes bermd's approval broker and serves its API (berm approvals, approve,
// deny) on its own socket in the approvals directory (approvalsName): one per bermd. A
// second bermd with the same control socket refuses to start rather than take the first's.
// decide, when set, says whether a uid may decide a tenant's calls (bermd --access); live
// are the node's live brokered secrets, which every field of a request passes.
func startApprovals(log *slog.Logger, reg prometheus.Registerer, o options, decide func(uid int, tenant string) error, live approval.Scrubber) (*approval.Broker, func() error, error) {
	var hook *approval.Webhook
	if o.webhookURL != "" {
		if o.webhookSecret == "" {
			return nil, nil, errors.New("--approval-webhook needs --approval-webhook-secret (the HMAC key file)")
		}
		key, err := approval.ReadToken(o.webhookSecret)
		if err != nil {
			return nil, nil, err
		}
		hook = &approval.Webhook{URL: o.webhookURL, Secret: []byte(key), Log: log}
	}
	who, err := approval.LoadApprovers(o.approvers)
	if err != nil {
		return nil, nil, err
	}
	b, err := approval.New(approval.Config{Log: log, Registry: reg, Webhook: hook, Approvers: who, DecideAccess: decide, Secrets: live})
	if err != nil {
		return nil, nil, err
	}
	token, err := approval.LoadToken(o.approvalsToken)
	if err != nil {
		return nil, nil, err
	}
	name := approvalsName(o.socket)
	sock, stop, err := approval.ServeExclusive(b, token, o.approvalsDir, name, approvalsLockWait)
	if errors.Is(err, approval.ErrServed) {
		return nil, nil, fmt.Errorf("%w: is a bermd with --socket %s already running?", err, o.socket)
	}
	if err != nil {
		return nil, nil, err
	}
	log.Info("approval API", "socket", sock)
	return b, stop, nil
}

// approvalsLockWait is how long a starting bermd waits for its approval socket's lock: the
// bermd it succeeds (one exiting idle on the same control socket) lets it go at its exit.
const approvalsLockWait = 5 * time.Second

// approvalsName is the approval API socket's name for the bermd serving socket: "bermd" for
// the default socket (where berm approve has always looked), else "bermd-" and a digest of
// the socket's absolute path, so that bermds with their own sockets have their own API.
func approvalsName(socket string) string {
	abs, err := filepath.Abs(socket)
	if err != nil {
		abs = socket
	}
	if abs == daemon.DefaultSocket {
		return "bermd"
	}
	h := sha256.Sum256([]byte(abs))
	return "bermd-" + hex.EncodeToString(h[:6])
}
