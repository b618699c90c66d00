package secrets

import (
	"bytes"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// anchor is a literal every match of a pattern contains: a text without any of a pattern's
// anchors is not given to its regular expression at all, so ordinary output costs a few
// substring searches instead of a regular expression run per pattern.
type anchor struct {
	lit  []byte
	fold bool // ASCII case-insensitive
}

// anchorsOf are literals one of which every match of re contains; nil when none can be told
// (the pattern then always runs).
func anchorsOf(re string) []anchor {
	p, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return nil
	}
	as := required(p.Simplify())
	for _, a := range as {
		if len(a.lit) < 2 {
			return nil // too short to rule anything out
		}
	}
	return as
}

// required: for a concatenation the best of its parts' anchor sets, for an alternation every
// branch's (each must have one), for a literal itself.
func required(re *syntax.Regexp) []anchor {
	switch re.Op {
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		var b []byte
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return nil
			}
			if fold {
				r = unicode.ToLower(r)
			}
			b = utf8.AppendRune(b, r)
		}
		return []anchor{{b, fold}}
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		var best []anchor
		for _, s := range re.Sub {
			if as := required(s); as != nil && (best == nil || shortest(as) > shortest(best)) {
				best = as
			}
		}
		return best
	case syntax.OpAlternate:
		var all []anchor
		for _, s := range re.Sub {
			as := required(s)
			if as == nil {
				return nil
			}
			all = append(all, as...)
		}
		return all
	}
	return nil
}

func shortest(as []anchor) int {
	n := -1
	for _, a := range as {
		if n < 0 || len(a.lit) < n {
			n = len(a.lit)
		}
	}
	return n
}

// mayMatch says whether text holds one of the anchors (lower is text in ASCII lower case, made
// once per text for the case-insensitive ones).
func mayMatch(as []anchor, text []byte, lower func() []byte) bool {
	if as == nil {
		return true
	}
	for _, a := range as {
		if a.fold {
			if bytes.Contains(lower(), a.lit) {
				return true
			}
		} else if bytes.Contains(text, a.lit) {
			return true
		}
	}
	return false
}
