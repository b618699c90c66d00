package secrets

// Finder finds literals in a stream's pieces as they pass, without holding any back: Next
// looks at the last bytes already seen (MaxLen less one) together with the new ones, so a
// literal cut by a read boundary is found in the read that completes it, before that read is
// passed on (berm's inspecting relay cuts the connection there: the literal never arrives
// whole).
type Finder struct {
	m    *matcher
	tail []byte
}

// NewFinder looks for lits (every literal at least the shortest form long).
func NewFinder(lits []Literal) *Finder {
	return &Finder{m: newMatcher(lits)}
}

// Next takes the stream's next piece p and returns the first literal that ends in it (ok),
// counting the bytes before p that could begin one.
func (f *Finder) Next(p []byte) (Literal, bool) {
	if len(f.m.lits) == 0 || len(p) == 0 {
		return Literal{}, false
	}
	text := append(f.tail, p...)
	if at, li := f.m.next(text, 0); at >= 0 {
		return f.m.lits[li], true
	}
	keep := min(len(text), f.m.maxLen-1)
	f.tail = append(f.tail[:0], text[len(text)-keep:]...)
	return Literal{}, false
}
