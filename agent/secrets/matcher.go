package secrets

import (
	"bytes"
	"encoding/binary"
)

// matcher finds many literals in one pass, whatever their number (every live secret of the
// node, a dozen forms each): a bit per possible first two bytes rules out almost every
// position at the cost of one load, and a map from the first four bytes gives the candidates
// to compare. Every form is at least minForm (> 4) bytes long.
type matcher struct {
	lits   []Literal
	pair   [1 << 16 / 64]uint64
	byHead map[uint32][]int32
	// short are the literals' first one, two and three bytes: what a text's last bytes must
	// be for them to start a literal the next write completes.
	short  map[string]bool
	maxLen int
}

func newMatcher(lits []Literal) *matcher {
	m := &matcher{lits: lits, byHead: map[uint32][]int32{}, short: map[string]bool{}}
	for i, l := range lits {
		b := l.Bytes
		if len(b) < 4 {
			continue
		}
		p := binary.LittleEndian.Uint16(b)
		m.pair[p/64] |= 1 << (p % 64)
		h := binary.LittleEndian.Uint32(b)
		m.byHead[h] = append(m.byHead[h], int32(i))
		for k := 1; k <= 3; k++ {
			m.short[string(b[:k])] = true
		}
		m.maxLen = max(m.maxLen, len(b))
	}
	return m
}

func (m *matcher) has(p uint16) bool { return m.pair[p/64]&(1<<(p%64)) != 0 }

// next is the leftmost literal in text at or after from, the longest there: its position and
// index, or -1.
func (m *matcher) next(text []byte, from int) (int, int) {
	if len(m.lits) == 0 {
		return -1, -1
	}
	for i := from; i+4 <= len(text); i++ {
		if !m.has(binary.LittleEndian.Uint16(text[i:])) {
			continue
		}
		best := -1
		for _, li := range m.byHead[binary.LittleEndian.Uint32(text[i:])] {
			l := m.lits[li].Bytes
			if bytes.HasPrefix(text[i:], l) && (best < 0 || len(l) > len(m.lits[best].Bytes)) {
				best = int(li)
			}
		}
		if best >= 0 {
			return i, best
		}
	}
	return -1, -1
}

// hold is how many of text's last bytes could start a literal not complete in text: they wait
// for the next write.
func (m *matcher) hold(text []byte) int {
	if len(m.lits) == 0 {
		return 0
	}
	for j := max(0, len(text)-(m.maxLen-1)); j < len(text); j++ {
		rest := text[j:]
		if len(rest) < 4 {
			if m.short[string(rest)] {
				return len(rest)
			}
			continue
		}
		if !m.has(binary.LittleEndian.Uint16(rest)) {
			continue
		}
		for _, li := range m.byHead[binary.LittleEndian.Uint32(rest)] {
			if l := m.lits[li].Bytes; len(l) > len(rest) && bytes.HasPrefix(l, rest) {
				return len(rest)
			}
		}
	}
	return 0
}
