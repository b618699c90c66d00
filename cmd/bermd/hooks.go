package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/rules"
)

// startRules loads the shipped ruleset plus --rules files and keeps them reloaded.
func startRules(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, paths []string, none bool) (agent.Evaluator, error) {
	if none {
		return nil, nil
	}
	eng, err := rules.Start(ctx, paths, reg, log)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	log.Info("rules loaded", "rules", eng.Set().Len(), "files", paths)
	return eng, nil
}

// startCollector ships the journal to ClickHouse when a DSN is given.
func startCollector(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir, dsn string) error {
	if dsn == "" {
		return nil
	}
	c, err := collector.New(collector.Config{StateDir: stateDir, DSN: dsn, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	go func() {
		defer c.Close()
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("collector stopped", "err", err)
		}
	}()
	return nil
}
