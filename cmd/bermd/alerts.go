package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/collector/falco"
)

var (
	alertWebhook       = flag.String("alert-webhook", "", "POST each alert as Falco's JSON to this URL (falcosidekick's /, or any Falco HTTP output reader; empty: off)")
	alertWebhookSecret = flag.String("alert-webhook-secret", "", "file holding the HMAC-SHA256 key that signs each alert (header "+falco.SignatureHeader+"; root-only; empty: unsigned)")
)

// startAlertWebhook follows the journal's alerts to --alert-webhook when one is given.
func startAlertWebhook(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir, host string) error {
	if *alertWebhook == "" {
		if *alertWebhookSecret != "" {
			return fmt.Errorf("--alert-webhook-secret needs --alert-webhook")
		}
		return nil
	}
	var secret []byte
	if *alertWebhookSecret != "" {
		st, err := os.Stat(*alertWebhookSecret)
		if err != nil {
			return fmt.Errorf("--alert-webhook-secret: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("--alert-webhook-secret: %s is readable by others (mode %v): chmod 600 it", *alertWebhookSecret, st.Mode().Perm())
		}
		if secret, err = os.ReadFile(*alertWebhookSecret); err != nil {
			return fmt.Errorf("--alert-webhook-secret: %w", err)
		}
		if len(secret) == 0 {
			return fmt.Errorf("--alert-webhook-secret: %s is empty", *alertWebhookSecret)
		}
	}
	r, err := falco.New(falco.Config{StateDir: stateDir, URL: *alertWebhook, Secret: secret, Hostname: host, Registry: reg, Logger: log})
	if err != nil {
		return fmt.Errorf("--alert-webhook: %w", err)
	}
	go func() {
		if err := r.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("alert webhook stopped", "err", err)
		}
	}()
	log.Info("alerts routed", "webhook", *alertWebhook, "signed", secret != nil)
	return nil
}
