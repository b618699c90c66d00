package secrets

import (
	"bytes"
	"io"
	"regexp"
	"sync"
	"time"
)

// Marker is what a redacted match is replaced with.
func Marker(name string) []byte { return []byte("[berm:redacted:" + name + "]") }

// Literal is a secret's form to redact.
type Literal struct {
	Name string
	Form
	// Owner is set for another call's secret (the node's registry): finding it is a
	// cross-call leak.
	Owner *Owner
}

// Pattern is a named regular expression to redact; with End, a match opens a block that lasts
// until End matches, across writes, all of it redacted.
type Pattern struct {
	Name       string
	Regex, End *regexp.Regexp

	anchors []anchor // literals every match holds (anchor.go)
	probed  bool
}

// Match is one redaction.
type Match struct {
	Name     string
	Encoding string // a secret's form; empty for a pattern
	Secret   bool   // a delivered secret (Literal), not a pattern
	Owner    *Owner // another call's secret: the call it was issued to
}

// Bounds of what the redactor holds back from the caller.
const (
	// lineHold: regular expressions see whole lines; a partial line is held up to this many
	// bytes, or until output pauses for idleFlush.
	lineHold  = 4096
	idleFlush = 50 * time.Millisecond
	// blockTail: inside a block, the bytes kept in case its end marker is cut by a write.
	blockTail = 256
)

// Redactor passes a stream through to W with every literal (in any form) and pattern match
// replaced by its Marker. A literal cut by a write boundary is still found: the longest tail of
// what came that could start one is held back (at most the longest form less one byte), so
// nothing of a secret passes before its end is seen. Patterns are matched on whole lines.
type Redactor struct {
	w       io.Writer
	lits    *matcher
	pats    []Pattern
	onMatch func(Match)
	// Refresh, when set, is called before each write (without the lock): it may SetLiterals.
	Refresh func(*Redactor)

	mu      sync.Mutex
	held    []byte // tail that may start a literal
	line    []byte // after the literal stage: the partial line the patterns wait on
	inBlock *Pattern
	timer   *time.Timer
	closed  bool
}

// NewRedactor redacts lits and pats from what is written to it, into w; onMatch (called with
// the redactor's lock held: it must not write to it) hears of each redaction.
func NewRedactor(w io.Writer, lits []Literal, pats []Pattern, onMatch func(Match)) *Redactor {
	pats = append([]Pattern(nil), pats...)
	for i := range pats {
		if !pats[i].probed { // a Pattern built by hand; CompilePattern's come probed
			pats[i].anchors, pats[i].probed = anchorsOf(pats[i].Regex.String()), true
		}
	}
	r := &Redactor{w: w, lits: newMatcher(lits), pats: pats, onMatch: onMatch}
	if onMatch == nil {
		r.onMatch = func(Match) {}
	}
	return r
}

// SetLiterals replaces the literals looked for from now on (the node's live secrets changed).
func (r *Redactor) SetLiterals(lits []Literal) {
	m := newMatcher(lits)
	r.mu.Lock()
	r.lits = m
	r.mu.Unlock()
}

// Write takes p; what cannot be part of a match any more goes to W.
func (r *Redactor) Write(p []byte) (int, error) {
	if r.Refresh != nil {
		r.Refresh(r)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, io.ErrClosedPipe
	}
	r.held = append(r.held, p...)
	r.run(false)
	return len(p), nil
}

// Close flushes everything held (a cut literal at the very end is no secret) and stops.
func (r *Redactor) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.run(true)
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

func (r *Redactor) run(final bool) {
	text := r.held
	var out []byte
	pos := 0
	for {
		at, li := r.lits.next(text, pos)
		if at < 0 {
			break
		}
		l := r.lits.lits[li]
		out = append(out, text[pos:at]...)
		out = append(out, Marker(l.Name)...)
		r.onMatch(Match{Name: l.Name, Encoding: l.Encoding, Secret: true, Owner: l.Owner})
		pos = at + len(l.Bytes)
	}
	tail := text[pos:]
	hold := 0
	if !final {
		hold = r.lits.hold(tail)
	}
	out = append(out, tail[:len(tail)-hold]...)
	r.held = append([]byte(nil), tail[len(tail)-hold:]...)
	r.patterns(out, final)
}

// patterns runs the pattern stage on b (literals already redacted) and writes what is done.
func (r *Redactor) patterns(b []byte, final bool) {
	if len(r.pats) == 0 {
		r.emit(b)
		return
	}
	r.line = append(r.line, b...)
	for {
		if r.inBlock != nil {
			if loc := r.inBlock.End.FindIndex(r.line); loc != nil {
				r.line = append([]byte(nil), r.line[loc[1]:]...)
				r.inBlock = nil
				continue
			}
			if final || len(r.line) <= blockTail {
				if final {
					r.line = nil
				}
				break
			}
			r.line = append([]byte(nil), r.line[len(r.line)-blockTail:]...)
			break
		}
		cut := len(r.line)
		if !final {
			cut = bytes.LastIndexByte(r.line, '\n') + 1
			if len(r.line)-cut > lineHold {
				cut = len(r.line)
			}
		}
		seg := r.line[:cut]
		if p, loc := r.blockStart(seg); p != nil {
			r.emit(r.redactLine(seg[:loc[0]]))
			r.emit(Marker(p.Name))
			r.onMatch(Match{Name: p.Name})
			r.line = append([]byte(nil), r.line[loc[1]:]...)
			r.inBlock = p
			continue
		}
		r.emit(r.redactLine(seg))
		r.line = append([]byte(nil), r.line[cut:]...)
		break
	}
	if !final && len(r.line) > 0 && r.inBlock == nil {
		r.armIdle()
	}
}

// armIdle lets a partial line out once output pauses (a prompt waits for its answer). Only
// the pattern stage's line goes: a held literal prefix stays until its end or the stream's.
func (r *Redactor) armIdle() {
	if r.timer != nil {
		r.timer.Reset(idleFlush)
		return
	}
	r.timer = time.AfterFunc(idleFlush, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed || r.inBlock != nil || len(r.line) == 0 {
			return
		}
		r.emit(r.redactLine(r.line))
		r.line = nil
	})
}

func (r *Redactor) blockStart(b []byte) (*Pattern, []int) {
	var best *Pattern
	var bloc []int
	lower := lowerOnce(b)
	for i := range r.pats {
		p := &r.pats[i]
		if p.End == nil || !mayMatch(p.anchors, b, lower) {
			continue
		}
		if loc := p.Regex.FindIndex(b); loc != nil && (bloc == nil || loc[0] < bloc[0]) {
			best, bloc = p, loc
		}
	}
	return best, bloc
}

func (r *Redactor) redactLine(b []byte) []byte {
	lower := lowerOnce(b)
	for _, p := range r.pats {
		if p.End != nil || !mayMatch(p.anchors, b, lower) {
			continue
		}
		b = p.Regex.ReplaceAllFunc(b, func([]byte) []byte {
			r.onMatch(Match{Name: p.Name})
			return Marker(p.Name)
		})
	}
	return b
}

func (r *Redactor) emit(b []byte) {
	if len(b) > 0 && r.w != nil {
		_, _ = r.w.Write(b)
	}
}

// lowerOnce is b in ASCII lower case, made on first use.
func lowerOnce(b []byte) func() []byte {
	var l []byte
	return func() []byte {
		if l == nil {
			l = bytes.ToLower(b)
		}
		return l
	}
}
