package agent

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/agent/policy"
)

// InjectRootsEnv names a PEM file of the roots the injecting egress verifies real servers
// against instead of the host's (bermd --inject-upstream-ca sets Config.InjectRoots; this
// variable serves an embedded berm run, and tests' local servers).
const InjectRootsEnv = "BERM_INJECT_UPSTREAM_CA"

// LoadInjectRoots reads a PEM bundle of upstream roots ("": the host's, nil pool).
func LoadInjectRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("injecting egress upstream roots: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("injecting egress upstream roots: no certificate in %s", path)
	}
	return p, nil
}

// Inject starts the call's injecting egress for its injected credentials: from now on the
// kernel moves the call's connects to their hosts' addresses (as its resolver answers them)
// on ports 443 and 80 there. It returns the call's CA certificate (PEM), for its trust store
// only. The egress ends with the call (End).
func (a *Agent) Inject(c *Call, creds []inject.Credential, life time.Duration) ([]byte, error) {
	if !c.networked || c.net == nil || c.policy == nil {
		return nil, errors.New("injected credentials need the call's network layer (spec.isolation.network: host-filtered)")
	}
	if a.injectErr != nil {
		return nil, fmt.Errorf("injected credentials: %w", a.injectErr)
	}
	var rules []uint32
	for _, d := range c.policy.Network.Domains {
		if d.Inject != "" {
			rules = append(rules, d.RuleID)
		}
	}
	c.dnsMu.Lock()
	resolving := c.dns != nil
	c.dnsMu.Unlock()
	if !resolving || len(rules) == 0 {
		return nil, errors.New("injected credentials need the call's resolver and its credential hosts' domain rules: refusing (fail closed)")
	}
	ic, err := inject.Start(inject.Config{CallKey: c.Start.CallKey, CallID: c.Start.CallID, Tenant: c.Start.Tenant, CgroupID: c.cgroup,
		Creds: creds, Orig: c.net.InjectOrig, Emit: func(ev event.Event) { a.Emit(c, ev) }, Roots: a.injectRoots, Life: life, Log: a.log, Metrics: a.injectM})
	if err != nil {
		return nil, err
	}
	if err := c.net.SetInject(ic.Port(), rules); err != nil {
		ic.Close()
		return nil, err
	}
	c.injectMu.Lock()
	c.inject = ic
	c.injectMu.Unlock()
	return ic.CAPEM(), nil
}

// reloadInjectRules checks that a hot-reloaded network policy names the same injected
// credentials' hosts as the call started with (the egress holds them, and the call's
// placeholders were made for them: a running call keeps its injection), and moves the
// resolver's pins by the reloaded rules' ids. restore puts the previous ids back.
func (c *Call) reloadInjectRules(pol *policy.NetPolicy) (restore func(), err error) {
	c.injectMu.Lock()
	injecting := c.inject != nil
	c.injectMu.Unlock()
	type hostRule struct {
		cred, host   string
		ports        string
		allowPrivate bool
	}
	hosts := func(ds []policy.DomainRule) (out []hostRule, ids []uint32) {
		for _, d := range ds {
			if d.Inject != "" {
				out = append(out, hostRule{d.Inject, d.Pattern, fmt.Sprint(d.Proto, d.Ports), d.AllowPrivate})
				ids = append(ids, d.RuleID)
			}
		}
		return out, ids
	}
	var was []hostRule
	if c.policy != nil {
		was, _ = hosts(c.policy.Network.Domains)
	}
	now, ids := hosts(pol.Domains)
	if !slices.Equal(was, now) {
		return nil, errors.New("the injected credentials' hosts changed: a running call keeps the injection it started with (a new call gets the reloaded one)")
	}
	if !injecting {
		return func() {}, nil
	}
	prev := c.net.SetInjectRules(ids)
	return func() { c.net.SetInjectRules(prev) }, nil
}

// closeInject ends the call's injecting egress: after it, none of its events is emitted.
func (c *Call) closeInject() error {
	c.injectMu.Lock()
	ic := c.inject
	c.inject = nil
	c.injectMu.Unlock()
	if ic == nil {
		return nil
	}
	return ic.Close()
}
