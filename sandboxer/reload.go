package sandboxer

import (
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// reloadPolicy watches the call's policy file and hot-reloads its network section into the
// running call. A file that does not load or compile keeps the current policy, and says so in
// the call's timeline.
func (l *launch) reloadPolicy(done <-chan struct{}) {
	path := l.spec.PolicyFile
	stamp := func() string {
		st, err := os.Stat(path)
		if err != nil {
			return ""
		}
		return fmt.Sprint(st.ModTime().UnixNano(), st.Size())
	}
	last := stamp()
	current := l.env.compiled.Network
	var generation uint64 // reloads applied so far
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		now := stamp()
		if now == last || now == "" {
			continue
		}
		last = now
		p, err := policy.Load(path)
		var c *policy.Compiled
		if err == nil {
			spec := l.spec
			spec.Policy = p
			c, err = recompile(&spec, l.env.compiled.LandlockABI)
		}
		if err == nil && c.Isolation != l.env.compiled.Isolation {
			err = fmt.Errorf("isolation.network changed from %s to %s: not applicable to a running call", l.env.compiled.Isolation, c.Isolation)
		}
		if err == nil {
			err = sameInjection(l.spec.Policy, p)
		}
		if err == nil && !reflect.DeepEqual(c.Network, current) {
			err = l.call.UpdateNetwork(&c.Network)
			if err == nil {
				current = c.Network
			}
		}
		r := &event.Reload{Surface: "network", Applied: err == nil, Detail: "network policy reloaded"}
		if err != nil {
			r.Detail = "policy reload refused, previous policy kept: " + err.Error()
		} else {
			generation++
		}
		r.Generation = generation
		l.call.Emit(event.Event{Kind: event.KindReload, Reload: r})
	}
}

// sameInjection refuses a reload that changes the running call's injected credentials (one
// added or removed, its hosts, header, format, basic user or query parameter): the call's
// placeholders, CA and egress were made for the ones it started with, and a reload must not
// move where its secrets go while it runs. A new call gets the reloaded ones.
func sameInjection(was, now *policy.Policy) error {
	injected := func(p *policy.Policy) map[string]policy.Inject {
		out := map[string]policy.Inject{}
		for _, c := range p.Spec.Credentials {
			if c.Deliver.Inject != nil {
				out[c.Name] = *c.Deliver.Inject
			}
		}
		return out
	}
	a, b := injected(was), injected(now)
	for name, in := range a {
		if nb, ok := b[name]; !ok || !reflect.DeepEqual(in, nb) {
			return fmt.Errorf("injected credential %s changed: a running call keeps the injection it started with (a new call gets the reloaded one)", name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			return fmt.Errorf("injected credential %s added: a running call keeps the injection it started with (a new call gets the reloaded one)", name)
		}
	}
	return nil
}
