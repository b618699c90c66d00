package sandboxer

import (
	"crypto/sha256"
	"fmt"
	"os"
	"sync"

	"github.com/bermsec/berm/agent/policy"
)

// policyFiles keeps the policies parsed from files, by path, with the digest of the text they
// were parsed from. A launcher serving many calls (bermd) reads a call's policy file each time
// (one read) but parses it again only when its text changed: parsing is a pure function of
// the file's name (errors and records name it) and text, so a policy parsed from the same name
// and the same bytes is the same policy. Callers get clones: nothing they change reaches the
// next call.
var policyFiles = &policyCache{max: 256}

type policyCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]policyEntry
	// parses counts the files parsed (tests).
	parses int
}

type policyEntry struct {
	sum [sha256.Size]byte
	p   *policy.Policy
}

// load is policy.Load, with parses of an unchanged file saved.
func (c *policyCache) load(path string) (*policy.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	sum := sha256.Sum256(data)
	c.mu.Lock()
	e, ok := c.entries[path]
	c.mu.Unlock()
	if ok && e.sum == sum && parentsUnchanged(e.p) {
		return e.p.Clone(), nil
	}
	p, err := policy.Parse(path, data)
	if err != nil {
		return nil, err // not kept: a fixed file is parsed on the next call
	}
	c.mu.Lock()
	c.parses++
	if c.entries == nil || len(c.entries) >= c.max {
		c.entries = map[string]policyEntry{}
	}
	c.entries[path] = policyEntry{sum: sum, p: p.Clone()}
	c.mu.Unlock()
	return p, nil
}

// parentsUnchanged says whether the policy files p extends still hold the text it was parsed
// from: a changed parent is a changed policy.
func parentsUnchanged(p *policy.Policy) bool {
	for _, par := range p.Parents {
		data, err := os.ReadFile(par.Path)
		if err != nil || sha256.Sum256(data) != par.Sum {
			return false
		}
	}
	return true
}
