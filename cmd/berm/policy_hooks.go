package main

import (
	"fmt"
	"os"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/policy"
)

func init() {
	extraCommands["policy"] = cmdPolicy
}

func cmdPolicy(args []string) int {
	if len(args) == 0 || (args[0] != "check" && args[0] != "show-strict") {
		fmt.Fprintln(os.Stderr, "usage: berm policy check FILE...   |   berm policy show-strict")
		return 2
	}
	if args[0] == "show-strict" {
		os.Stdout.Write(policy.StrictYAML())
		return 0
	}
	return policy.CheckMain(args[1:], os.Stdout, os.Stderr)
}

// loadRunPolicy resolves --policy (default: the built-in strict policy) and takes the caps
// the policy sets; flags given explicitly override them.
func loadRunPolicy(path string, lim *event.Limits, explicit map[string]bool) (*policy.Policy, error) {
	p := policy.Strict()
	if path != "" {
		var err error
		if p, err = policy.Load(path); err != nil {
			return nil, err
		}
	}
	r := p.Spec.Resources
	set := func(flag string, dst *int64, v int64) {
		if !explicit[flag] && v > 0 {
			*dst = v
		}
	}
	set("memory", &lim.MemoryBytes, r.MemoryBytes)
	set("pids", &lim.Pids, r.Pids)
	set("output-limit", &lim.OutputBytes, r.OutputBytes)
	set("tmp-size", &lim.TmpBytes, r.TmpSizeBytes)
	if !explicit["cpus"] && r.MilliCPUs > 0 {
		lim.CPUs = float64(r.MilliCPUs) / 1000
	}
	if !explicit["timeout"] && r.WallTime > 0 {
		lim.WallTime = r.WallTime
	}
	return p, nil
}
