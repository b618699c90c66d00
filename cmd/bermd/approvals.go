package main

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/sandboxer/approval"
)

// startApprovals makes bermd's approval broker and serves its API (berm approvals, approve,
// deny) on bermd.sock in the approvals directory.
func startApprovals(log *slog.Logger, reg prometheus.Registerer, o options, live approval.Scrubber) (*approval.Broker, func() error, error) {
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
	b, err := approval.New(approval.Config{Log: log, Registry: reg, Webhook: hook, Approvers: who, Secrets: live})
	if err != nil {
		return nil, nil, err
	}
	token, err := approval.LoadToken(o.approvalsToken)
	if err != nil {
		return nil, nil, err
	}
	sock, stop, err := approval.Serve(b, token, o.approvalsDir, "bermd")
	if err != nil {
		return nil, nil, err
	}
	log.Info("approval API", "socket", sock)
	return b, stop, nil
}
