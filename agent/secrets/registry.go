package secrets

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
)

// Owner is the call a live secret was issued to.
type Owner struct {
	CallKey, CallID, Tenant string
	Name                    string // the credential's name
	Fingerprint             string
}

// Hit is a live secret found in a string.
type Hit struct {
	Owner
	Encoding string
}

// Registry is the node's live secrets, every call's, while their calls run: what shows one of
// them in another call's output, exec arguments or paths is caught. Values stay in memory.
type Registry struct {
	FP *Fingerprinter

	mu   sync.RWMutex
	live map[*entry]bool
	n    atomic.Int32
	gen  atomic.Uint64 // changes with every Add and remove
}

// Gen changes whenever a secret is added or removed.
func (r *Registry) Gen() uint64 { return r.gen.Load() }

// Others are the forms of every live secret not of call callKey, as literals naming their
// owner: a call's output is scanned for its neighbours' secrets too.
func (r *Registry) Others(callKey string) []Literal {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Literal
	for e := range r.live {
		if e.CallKey == callKey {
			continue
		}
		for _, f := range e.forms {
			out = append(out, Literal{Name: e.Name, Form: f, Owner: &e.Owner})
		}
	}
	return out
}

type entry struct {
	Owner
	forms []Form
}

// NewRegistry is an empty registry fingerprinting with fp.
func NewRegistry(fp *Fingerprinter) *Registry {
	return &Registry{FP: fp, live: map[*entry]bool{}}
}

// Add registers value for its call until the returned remove is called.
func (r *Registry) Add(o Owner, value []byte) (remove func()) {
	e := &entry{Owner: o, forms: Forms(value)}
	r.mu.Lock()
	r.live[e] = true
	r.mu.Unlock()
	r.n.Add(1)
	r.gen.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.live, e)
			r.mu.Unlock()
			r.n.Add(-1)
			r.gen.Add(1)
		})
	}
}

// Live says whether any secret is registered (checked first, at no cost, on every event).
func (r *Registry) Live() bool { return r != nil && r.n.Load() > 0 }

// Scrub returns s with every live secret's form in it replaced by its marker, and what it
// found. The string is scanned once per form: a handful of live secrets, a few forms each.
func (r *Registry) Scrub(s string) (string, []Hit) {
	if !r.Live() || len(s) < minForm {
		return s, nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var hits []Hit
	for e := range r.live {
		for _, f := range e.forms {
			if strings.Contains(s, string(f.Bytes)) {
				s = string(bytes.ReplaceAll([]byte(s), f.Bytes, Marker(e.Name)))
				hits = append(hits, Hit{Owner: e.Owner, Encoding: f.Encoding})
			}
		}
	}
	return s, hits
}
