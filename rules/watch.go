package rules

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"log/slog"
	"os"
	"strings"
	"time"
)

// WatchInterval is how often Watch looks at the rule files.
var WatchInterval = time.Second

// Watch reloads the rules from paths into eng whenever a file changes (polling modification
// times, sizes and the file list). A load that fails keeps the previous set active, logs the
// problems and is reported by eng.ReloadError until a good load. Returns when ctx ends.
func Watch(ctx context.Context, paths []string, eng *Engine, log *slog.Logger) {
	watch(ctx, paths, eng, log, func() (*Set, error) { return LoadFiles(paths...) })
}

// WatchWithShipped is Watch for a set loaded with LoadWithShipped.
func WatchWithShipped(ctx context.Context, paths []string, eng *Engine, log *slog.Logger) {
	watch(ctx, paths, eng, log, func() (*Set, error) { return LoadWithShipped(paths...) })
}

func watch(ctx context.Context, paths []string, eng *Engine, log *slog.Logger, load func() (*Set, error)) {
	if log == nil {
		log = slog.Default()
	}
	// Compare with the files as the active set read them, so that a change made between the
	// load and this call is not missed.
	last := fingerprint(paths)
	if s := eng.Set(); s != nil && s.fingerprint != "" {
		last = s.fingerprint
	}
	t := time.NewTicker(WatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp := fingerprint(paths)
		if fp == last {
			continue
		}
		last = fp
		set, err := load()
		eng.setReloadResult(err)
		if err != nil {
			log.Error("rules reload failed, keeping the previous rule set", "paths", paths, "err", err)
			continue
		}
		eng.Swap(set)
		log.Info("rules reloaded", "paths", paths, "rules", set.Len(), "files", len(set.Files()))
	}
}

func fingerprint(paths []string) string {
	var b strings.Builder
	files, err := filesOf(paths)
	if err != nil {
		return "error: " + err.Error()
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s:gone;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// Start loads the shipped ruleset plus paths into a new engine (metrics on reg, which may be
// nil) and, when paths are given, keeps them reloaded until ctx ends.
func Start(ctx context.Context, paths []string, reg prometheus.Registerer, log *slog.Logger) (*Engine, error) {
	set, err := LoadWithShipped(paths...)
	if err != nil {
		return nil, err
	}
	eng := NewEngine(set, reg)
	if len(paths) > 0 {
		go WatchWithShipped(ctx, paths, eng, log)
	}
	return eng, nil
}
