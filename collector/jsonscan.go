package collector

import (
	"bytes"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

// scanner reads JSON in the one form the journal's writer gives it: compact, members in the
// order of the Go struct, omitempty members left out when empty, integers without fraction or
// exponent, strings escaped the writer's way. Anything else makes it fail (bad), and the
// caller decodes the record the general way: the scanner only ever accepts input that the
// general decoder reads to the same values, and whose parts the general encoder writes back
// byte for byte. Strings it returns are substrings of s, not copies.
type scanner struct {
	s   string
	i   int
	bad bool
}

// fail gives up on the input; every later read fails too, so callers check bad once at the end.
func (sc *scanner) fail() {
	sc.bad = true
	sc.i = len(sc.s)
}

func (sc *scanner) check(ok bool) {
	if !ok {
		sc.fail()
	}
}

func (sc *scanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

func (sc *scanner) expect(c byte) {
	if sc.i < len(sc.s) && sc.s[sc.i] == c {
		sc.i++
		return
	}
	sc.fail()
}

// has reads tok if it comes next. Members are read as tokens with the punctuation before
// them: `{"path":` for an object's first, `,"dirfd":` for the others. has is inlined and the
// token constant, so it is one comparison (a few loads for the shorter tokens): matching
// member names in order, rather than looking each up, is much of what makes the scanner
// cheaper than a general decoder.
func (sc *scanner) has(tok string) bool {
	if strings.HasPrefix(sc.s[sc.i:], tok) {
		sc.i += len(tok)
		return true
	}
	return false
}

// need reads a member the writer always writes.
func (sc *scanner) need(tok string) {
	if !sc.has(tok) {
		sc.fail()
	}
}

func (sc *scanner) literal(lit string) bool {
	if strings.HasPrefix(sc.s[sc.i:], lit) {
		sc.i += len(lit)
		return true
	}
	return false
}

func (sc *scanner) null() bool { return sc.literal("null") }

func (sc *scanner) boolean() bool {
	if sc.literal("true") {
		return true
	}
	sc.check(sc.literal("false"))
	return false
}

// Byte classes in a string's text. The writer escapes control characters, and <, > and &
// (as HTML-safe JSON does): met unescaped, they mean another writer.
const (
	strPlain = iota
	strQuote
	strBackslash
	strNever
	strWide // the first byte of a multi-byte character
)

var strClass = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = strNever
	}
	t['<'], t['>'], t['&'] = strNever, strNever, strNever
	t['"'], t['\\'] = strQuote, strBackslash
	for c := 0x80; c < 0x100; c++ {
		t[c] = strWide
	}
	return t
}()

func (sc *scanner) str() string {
	s := sc.s
	if sc.i >= len(s) || s[sc.i] != '"' {
		sc.fail()
		return ""
	}
	start, wide := sc.i+1, false
	for j := start; j < len(s); j++ {
		switch strClass[s[j]] {
		case strPlain:
		case strQuote:
			v := s[start:j]
			// The writer replaces invalid UTF-8 and escapes U+2028 and U+2029.
			if wide && (!utf8.ValidString(v) || strings.Contains(v, "\u2028") || strings.Contains(v, "\u2029")) {
				sc.fail()
				return ""
			}
			sc.i = j + 1
			return v
		case strBackslash:
			return sc.escaped(start)
		case strWide:
			wide = true
		default:
			sc.fail()
			return ""
		}
	}
	sc.fail()
	return ""
}

// escaped reads a string with escapes, which events rarely have (an & in an argv, a control
// character in a path): go-json decodes it as the general path would, and it is taken only if
// the writer writes the decoded string back exactly as it stands.
func (sc *scanner) escaped(start int) string {
	s, j := sc.s, start
	for ; j < len(s) && s[j] != '"'; j++ {
		if s[j] == '\\' {
			j++
		}
	}
	if j >= len(s) {
		sc.fail()
		return ""
	}
	raw := []byte(s[start-1 : j+1])
	var v string
	if err := gojson.Unmarshal(raw, &v); err != nil {
		sc.fail()
		return ""
	}
	if back, err := gojson.Marshal(v); err != nil || !bytes.Equal(back, raw) {
		sc.fail()
		return ""
	}
	sc.i = j + 1
	return v
}

// nonEmpty reads an omitempty string, which the writer leaves out when empty.
func (sc *scanner) nonEmpty() string {
	v := sc.str()
	sc.check(v != "")
	return v
}

// integer reads an integer as the writer writes it: digits, no leading zero, no fraction,
// no exponent, no "-0".
func (sc *scanner) integer() (mag uint64, neg bool) {
	s, i := sc.s, sc.i
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		mag = mag*10 + uint64(s[i]-'0') // past 20 digits it wraps, and is refused below
		i++
	}
	n := i - start
	if n == 0 || n > 20 || (s[start] == '0' && (n > 1 || neg)) ||
		(n == 20 && s[start:i] > "18446744073709551615") ||
		(i < len(s) && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) {
		sc.fail()
		return 0, false
	}
	sc.i = i
	return mag, neg
}

func (sc *scanner) unsigned(max uint64) uint64 {
	m, neg := sc.integer()
	if neg || m > max {
		sc.fail()
		return 0
	}
	return m
}

func (sc *scanner) signed(max int64) int64 {
	m, neg := sc.integer()
	if neg {
		if m > uint64(max)+1 {
			sc.fail()
			return 0
		}
		return -int64(m) // the most negative value too: -(1<<63) wraps to itself
	}
	if m > uint64(max) {
		sc.fail()
		return 0
	}
	return int64(m)
}

func (sc *scanner) uint64() uint64 { return sc.unsigned(math.MaxUint64) }
func (sc *scanner) uint32() uint32 { return uint32(sc.unsigned(math.MaxUint32)) }
func (sc *scanner) uint16() uint16 { return uint16(sc.unsigned(math.MaxUint16)) }
func (sc *scanner) int64() int64   { return sc.signed(math.MaxInt64) }
func (sc *scanner) int32() int32   { return int32(sc.signed(math.MaxInt32)) }
func (sc *scanner) int() int       { return int(sc.signed(math.MaxInt)) }

// strs reads an array of strings, keeping them only when keep; n is how many there were.
func (sc *scanner) strs(keep bool) (out []string, n int) {
	sc.expect('[')
	if sc.peek() == ']' {
		sc.i++
		return nil, 0
	}
	for {
		v := sc.str()
		if keep {
			out = append(out, v)
		}
		n++
		if sc.peek() != ',' {
			sc.expect(']')
			return out, n
		}
		sc.i++
	}
}

// strList reads an array of strings that is kept: [] is an empty slice, as decoding gives.
func (sc *scanner) strList() []string {
	out, _ := sc.strs(true)
	if out == nil {
		out = []string{}
	}
	return out
}

// time reads a time as time.Time's UnmarshalJSON does: a string without escapes (it does not
// unescape) parsed by parseStrictRFC3339, which is time.Parse with the RFC 3339 layout while
// Go keeps its extra strictness disabled (go.dev/issue/54580; TestScannerTime checks it).
// The writer's usual form, UTC to the nanosecond, is read directly.
func (sc *scanner) time() time.Time {
	s := sc.s
	if sc.i >= len(s) || s[sc.i] != '"' {
		sc.fail()
		return time.Time{}
	}
	n := strings.IndexByte(s[sc.i+1:], '"')
	if n < 0 {
		sc.fail()
		return time.Time{}
	}
	v := s[sc.i+1 : sc.i+1+n]
	t, ok := utcTime(v)
	if !ok {
		var err error
		if t, err = time.Parse(time.RFC3339, v); err != nil || strings.IndexByte(v, '\\') >= 0 {
			sc.fail()
			return time.Time{}
		}
	}
	sc.i += n + 2
	return t
}

// utcTime reads 2006-01-02T15:04:05Z with 0 to 9 digits of fraction, the form RFC3339Nano
// gives UTC times, as time.Parse would; ok is false for anything else.
func utcTime(v string) (time.Time, bool) {
	if len(v) < 20 || len(v) > 30 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' ||
		v[16] != ':' || v[len(v)-1] != 'Z' {
		return time.Time{}, false
	}
	num := func(s string) (int, bool) {
		n := 0
		for _, c := range []byte(s) {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(v[0:4])
	month, ok2 := num(v[5:7])
	day, ok3 := num(v[8:10])
	hour, ok4 := num(v[11:13])
	minute, ok5 := num(v[14:16])
	sec, ok6 := num(v[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := v[19 : len(v)-1]; frac != "" {
		digits, ok := num(frac[min(1, len(frac)):])
		if frac[0] != '.' || len(frac) < 2 || !ok {
			return time.Time{}, false
		}
		nsec = digits
		for range 10 - len(frac) {
			nsec *= 10
		}
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
