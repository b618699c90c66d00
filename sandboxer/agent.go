package sandboxer

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/probe"
)

// NewAgent starts the node agent with what it needs of the launcher, which owns the cgroups:
// the root every call's cgroup lives under (the network programs attach there once) and a way
// to kill a call. The agent does not reach into cgroups itself.
func NewAgent(cfg agent.Config) (*agent.Agent, error) {
	l, err := hostLayout()
	if err != nil {
		return nil, fmt.Errorf("cgroup layout: %w", err)
	}
	root := filepath.Join(l.V2, cgroup.Root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	cfg.NetRoot = root
	cfg.Kill = cgroup.Kill
	a, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	// Revokes of calls whose launcher was killed mid-call run before this one takes calls.
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	replayRevokes(cfg.StateDir, a, log)
	return a, nil
}

// ProbeKernel runs the kernel feature probe on this host's cgroup layout.
func ProbeKernel() *probe.Report {
	var cg probe.Cgroups
	if l, err := hostLayout(); err != nil {
		cg.Err = err
	} else {
		cg = probe.Cgroups{V2: l.V2, V2Controllers: l.V2Controllers, V1: l.V1, Root: filepath.Join(l.V2, cgroup.Root)}
	}
	return probe.Run(cg)
}
