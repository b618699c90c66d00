package secrets

import (
	"fmt"
	"regexp"
	"sync"
)

// CompilePattern is the Pattern named name for the regular expression re (RE2) and, unless end
// is empty, its block end. What it compiles it keeps for the process: a policy's patterns are
// the same for every call, and compiling the strict policy's for each call's two streams cost
// half a millisecond of a warm launch. A *regexp.Regexp is safe to share between redactors.
func CompilePattern(name, re, end string) (Pattern, error) {
	c, err := patternCache.get(re, end)
	if err != nil {
		return Pattern{}, err
	}
	return Pattern{Name: name, Regex: c.re, End: c.end, anchors: c.anchors, probed: true}, nil
}

type compiledPattern struct {
	re, end *regexp.Regexp
	anchors []anchor
}

// maxCachedPatterns bounds the cache: policies that change their patterns (a hot reload, a new
// policy per call) start it over rather than grow it.
const maxCachedPatterns = 1024

var patternCache = &patterns{m: map[[2]string]*compiledPattern{}}

type patterns struct {
	mu sync.Mutex
	m  map[[2]string]*compiledPattern
}

func (p *patterns) get(re, end string) (*compiledPattern, error) {
	key := [2]string{re, end}
	p.mu.Lock()
	c := p.m[key]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c = &compiledPattern{}
	var err error
	if c.re, err = regexp.Compile(re); err != nil {
		return nil, fmt.Errorf("regex %q: %w", re, err)
	}
	if end != "" {
		if c.end, err = regexp.Compile(end); err != nil {
			return nil, fmt.Errorf("end %q: %w", end, err)
		}
	}
	c.anchors = anchorsOf(re)
	p.mu.Lock()
	if len(p.m) >= maxCachedPatterns {
		clear(p.m)
	}
	p.m[key] = c
	p.mu.Unlock()
	return c, nil
}
