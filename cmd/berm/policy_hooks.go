package main

import (
	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
)

type runPolicy struct{ name, hash string }

// loadRunPolicy resolves --policy. Until policies are compiled into the kernel (issue 3), only
// the built-in resource defaults apply, and a policy file is refused rather than ignored.
func loadRunPolicy(path string, lim *event.Limits) (runPolicy, error) {
	if path != "" {
		return runPolicy{}, errPolicyUnsupported
	}
	return runPolicy{name: "builtin-default"}, nil
}

// loadRunRules resolves --rules.
func loadRunRules(paths []string, none bool) (agent.Evaluator, error) {
	return nil, nil
}

type policyError string

func (e policyError) Error() string { return string(e) }

const errPolicyUnsupported = policyError("--policy: policy files are not enforced by this build yet; refusing to run rather than ignore it")
