package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent"
)

// startRules loads the detection rules (wired in with the rules engine).
func startRules(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, paths []string, none bool) (agent.Evaluator, error) {
	return nil, nil
}

// startCollector ships the journal to ClickHouse when a DSN is given (wired in with the
// collector).
func startCollector(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir, dsn string) error {
	if dsn != "" {
		return errors.New("--clickhouse: this build has no collector")
	}
	return nil
}
