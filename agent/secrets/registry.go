package secrets

import (
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
	// matcher finds every live form at once; made for generation matcherGen (index).
	matcher    *matcher
	matcherGen uint64
	// chunkIx finds chunks of every live secret in a DNS name (dnsname.go), for chunkGen.
	chunkIx  *chunkIndex
	chunkGen uint64
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
	forms     []Form
	nameForms []Form // as a DNS name carries them (dnsname.go)
}

// NewRegistry is an empty registry fingerprinting with fp.
func NewRegistry(fp *Fingerprinter) *Registry {
	return &Registry{FP: fp, live: map[*entry]bool{}}
}

// Add registers value for its call until the returned remove is called.
func (r *Registry) Add(o Owner, value []byte) (remove func()) {
	e := &entry{Owner: o, forms: Forms(value), nameForms: nameForms(value)}
	r.mu.Lock()
	r.live[e] = true
	r.n.Add(1)
	r.gen.Add(1)
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.live, e)
			r.n.Add(-1)
			r.gen.Add(1)
			r.mu.Unlock()
		})
	}
}

// Live says whether any secret is registered (checked first, at no cost, on every event).
func (r *Registry) Live() bool { return r != nil && r.n.Load() > 0 }

// Scrub returns s with every live secret's form in it replaced by its marker, and what it
// found: one pass over s whatever the number of live secrets (matcher).
func (r *Registry) Scrub(s string) (string, []Hit) {
	if !r.Live() || len(s) < minForm {
		return s, nil
	}
	m := r.index()
	text := []byte(s)
	at, li := m.next(text, 0)
	if at < 0 {
		return s, nil
	}
	var out []byte
	var hits []Hit
	pos := 0
	for at >= 0 {
		l := m.lits[li]
		out = append(append(out, text[pos:at]...), Marker(l.Name)...)
		hits = append(hits, Hit{Owner: *l.Owner, Encoding: l.Encoding})
		pos = at + len(l.Bytes)
		at, li = m.next(text, pos)
	}
	return string(append(out, text[pos:]...)), hits
}

// index is the matcher of every live secret's forms, made again when the set changed.
func (r *Registry) index() *matcher {
	g := r.gen.Load()
	r.mu.RLock()
	m, mg := r.matcher, r.matcherGen
	r.mu.RUnlock()
	if m != nil && mg == g {
		return m
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.matcher != nil && r.matcherGen == r.gen.Load() {
		return r.matcher
	}
	var lits []Literal
	for e := range r.live {
		for _, f := range e.forms {
			lits = append(lits, Literal{Name: e.Name, Form: f, Owner: &e.Owner})
		}
	}
	r.matcher, r.matcherGen = newMatcher(lits), r.gen.Load()
	return r.matcher
}

// RedactString is s with every literal in it replaced by its marker, and those found.
func RedactString(s string, lits []Literal) (string, []Literal) {
	m := newMatcher(lits)
	text := []byte(s)
	at, li := m.next(text, 0)
	if at < 0 {
		return s, nil
	}
	var out []byte
	var found []Literal
	pos := 0
	for at >= 0 {
		l := m.lits[li]
		out = append(append(out, text[pos:at]...), Marker(l.Name)...)
		found = append(found, l)
		pos = at + len(l.Bytes)
		at, li = m.next(text, pos)
	}
	return string(append(out, text[pos:]...)), found
}
