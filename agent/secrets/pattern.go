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

// ScrubPatterns is s with every match of pats replaced by its Marker, and the names of the
// patterns that matched, each once, in pats' order: what the stream Redactor does to a line,
// for one string (an approval request's object). A block pattern's match is redacted with
// everything after it up to its End's match, or to the end of s when End does not match.
func ScrubPatterns(s string, pats []Pattern) (string, []string) {
	if len(pats) == 0 || s == "" {
		return s, nil
	}
	b := []byte(s)
	var names []string
	hit := func(name string) {
		for _, n := range names {
			if n == name {
				return
			}
		}
		names = append(names, name)
	}
	for i := range pats {
		p := &pats[i]
		if !mayMatch(p.anchors, b, lowerOnce(b)) {
			continue
		}
		if p.End == nil {
			b = p.Regex.ReplaceAllFunc(b, func(m []byte) []byte {
				if len(m) == 0 {
					return m
				}
				hit(p.Name)
				return Marker(p.Name)
			})
			continue
		}
		var out []byte
		for {
			loc := p.Regex.FindIndex(b)
			if loc == nil || loc[1] == loc[0] { // an empty match redacts nothing (and would not end)
				break
			}
			hit(p.Name)
			out = append(append(out, b[:loc[0]]...), Marker(p.Name)...)
			rest := b[loc[1]:]
			if end := p.End.FindIndex(rest); end != nil {
				b = rest[end[1]:]
				continue
			}
			b = nil
			break
		}
		b = append(out, b...)
	}
	return string(b), names
}
