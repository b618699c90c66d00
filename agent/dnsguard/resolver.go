// Package dnsguard is berm's per-node DNS resolver for networked calls. The cgroup sock hooks
// (bpf/lib/dnspin.h) send every port-53 query of a call, UDP or TCP, whatever address the
// tool names, to the call's own port on loopback; the call's listeners answer only names its
// policy's domain rules allow (asking the upstream), refuse the others, pin each answered
// address for the call in the kernel with the answer's TTL plus a grace, and record every
// query as a dns event. The port tells the call: no client address is trusted to say it.
package dnsguard

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures the resolver.
type Config struct {
	// Upstream is where allowed queries go, host or host:port (port 53 by default). Empty:
	// the first nameserver of ResolvConf.
	Upstream   string
	ResolvConf string // default /etc/resolv.conf
	// Grace is added to each answer's TTL before its pin expires: a tool connects just after
	// its lookup, and a TTL of 0 must still let that connect through. Default DefaultGrace.
	Grace time.Duration
	// Timeout bounds one upstream exchange; the query gets SERVFAIL past it. Default 3s.
	Timeout time.Duration
	// GCInterval is how often expired pins leave the kernel's map (they are void already:
	// the hooks compare their expiry). Default 1s.
	GCInterval time.Duration
	Logger     *slog.Logger
	Registry   prometheus.Registerer // nil: no metrics
}

// DefaultGrace is the grace a pin gets past its answer's TTL.
const DefaultGrace = 5 * time.Second

// maxInflight bounds one call's queries in flight to the upstream: a flood waits on its own
// call's slots (and its UDP queries beyond are answered SERVFAIL), never on another call's.
const maxInflight = 32

// Resolver is the node's resolver; one per agent.
type Resolver struct {
	cfg      Config
	upstream string
	log      *slog.Logger
	m        *metrics

	mu     sync.Mutex
	calls  map[*Call]struct{}
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

// New starts the resolver (its pin cleaner); calls are attached with Attach.
func New(cfg Config) (*Resolver, error) {
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.GCInterval == 0 {
		cfg.GCInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	up, err := upstreamAddr(cfg.Upstream, cfg.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("dns resolver: %w", err)
	}
	r := &Resolver{cfg: cfg, upstream: up, log: cfg.Logger, m: newMetrics(cfg.Registry), calls: map[*Call]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.gcLoop()
	return r, nil
}

// Upstream is the address allowed queries are sent to.
func (r *Resolver) Upstream() string { return r.upstream }

// Close stops the cleaner and every call still attached.
func (r *Resolver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	calls := make([]*Call, 0, len(r.calls))
	for c := range r.calls {
		calls = append(calls, c)
	}
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	var errs []error
	for _, c := range calls {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (r *Resolver) gcLoop() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.mu.Lock()
			calls := make([]*Call, 0, len(r.calls))
			for c := range r.calls {
				calls = append(calls, c)
			}
			r.mu.Unlock()
			for _, c := range calls {
				c.pins.expire(now)
			}
		}
	}
}

// CheckUpstream says what is wrong with an upstream address given on a command line.
func CheckUpstream(s string) error {
	_, err := upstreamAddr(s, "")
	return err
}

// upstreamAddr is the upstream as host:port: the one given, or resolv.conf's first nameserver.
func upstreamAddr(given, resolvConf string) (string, error) {
	if given == "" {
		if resolvConf == "" {
			resolvConf = "/etc/resolv.conf"
		}
		ns, err := firstNameserver(resolvConf)
		if err != nil {
			return "", fmt.Errorf("no --dns-upstream and %w", err)
		}
		given = ns
	}
	if _, _, err := net.SplitHostPort(given); err != nil {
		given = net.JoinHostPort(strings.Trim(given, "[]"), "53")
	}
	host, _, err := net.SplitHostPort(given)
	if err != nil || net.ParseIP(host) == nil {
		return "", fmt.Errorf("upstream %q: expected an address like 192.0.2.53 or [2001:db8::53]:53", given)
	}
	return given, nil
}

func firstNameserver(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			return fs[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return "", fmt.Errorf("%s names no nameserver", path)
}
