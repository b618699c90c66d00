package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/rules"
)

func init() {
	extraCommands["rules"] = cmdRules
	sourceOpeners["clickhouse"] = openClickHouse
}

func cmdRules(args []string) int {
	const use = "usage: berm rules lint PATH...   |   berm rules test PATH...   ('berm rules lint -h': their flags)"
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Println(use)
		return 0
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, use)
		return 2
	}
	switch args[0] {
	case "lint":
		return rules.LintMain(args[1:], os.Stdout, os.Stderr)
	case "test":
		return rules.TestMain(args[1:], os.Stdout, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "berm rules: unknown subcommand %q (lint, test)\n", args[0])
	return 2
}

// loadRunRules is the embedded default's rules engine: the shipped ruleset plus --rules files,
// reloaded while the call runs when a file changes (a broken edit keeps the previous set).
func loadRunRules(paths []string, none bool, log *slog.Logger) (agent.Evaluator, func(), error) {
	if none {
		return nil, func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := rules.Start(ctx, paths, nil, log)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	return eng, cancel, nil
}

func openClickHouse(dsn string) (audit.Source, func(), error) {
	src, err := collector.OpenSource(context.Background(), dsn)
	if err != nil {
		return nil, nil, err
	}
	return src, func() { src.Close() }, nil
}
