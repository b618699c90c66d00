package event

import (
	"errors"
	"fmt"
	"strings"
)

// ValidTraceParent checks a W3C traceparent (https://www.w3.org/TR/trace-context/#traceparent-header)
// strictly: version 00, exactly "00-" 32 lowercase hex digits (the trace id, not all zero) "-"
// 16 lowercase hex digits (the parent span id, not all zero) "-" 2 lowercase hex digits (the
// flags). Empty is valid: no trace context.
func ValidTraceParent(s string) error {
	if s == "" {
		return nil
	}
	const want = `expected 00-<32 lowercase hex trace id>-<16 lowercase hex span id>-<2 hex flags>`
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return fmt.Errorf("%q: %s", clip(s), want)
	}
	if s[:2] != "00" {
		return fmt.Errorf("%q: version %q: only version 00 is known", s, s[:2])
	}
	for _, part := range []struct{ name, v string }{{"trace id", s[3:35]}, {"span id", s[36:52]}, {"flags", s[53:]}} {
		if !lowerHex(part.v) {
			return fmt.Errorf("%q: the %s is not lowercase hex: %s", s, part.name, want)
		}
		if part.name != "flags" && strings.Trim(part.v, "0") == "" {
			return fmt.Errorf("%q: the %s is all zeros (invalid)", s, part.name)
		}
	}
	return nil
}

// ErrNoTraceParent is returned by ParseTraceParent for an empty value.
var ErrNoTraceParent = errors.New("no traceparent")

// ParseTraceParent is a valid traceparent's trace id, parent span id and flags.
func ParseTraceParent(s string) (traceID [16]byte, spanID [8]byte, flags byte, err error) {
	if s == "" {
		return traceID, spanID, 0, ErrNoTraceParent
	}
	if err = ValidTraceParent(s); err != nil {
		return traceID, spanID, 0, err
	}
	hexInto(traceID[:], s[3:35])
	hexInto(spanID[:], s[36:52])
	var f [1]byte
	hexInto(f[:], s[53:55])
	return traceID, spanID, f[0], nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hexInto(dst []byte, s string) {
	val := func(c byte) byte {
		if c <= '9' {
			return c - '0'
		}
		return c - 'a' + 10
	}
	for i := range dst {
		dst[i] = val(s[2*i])<<4 | val(s[2*i+1])
	}
}

// clip keeps an error about a hostile value short.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
