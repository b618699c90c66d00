package audit

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Safe is s as `ls -b` prints a file name: control characters, escape sequences, other
// unprintable characters and invalid UTF-8 as C escapes (\n, \t, \033, \177, \302\233), and
// a backslash doubled, so that what a tool named cannot move the cursor, clear a line or
// start a forged row on the terminal that reads a timeline. Printable text, spaces and
// non-ASCII letters are kept as they are.
func Safe(s string) string {
	if safeAlready(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == utf8.RuneError && n <= 1:
			octal(&b, s[i])
		case r < 0x80 && cEscape[r] != 0:
			b.WriteByte('\\')
			b.WriteByte(cEscape[r])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			// The bytes of the character: U+009B alone is a CSI on some terminals.
			for k := i; k < i+n; k++ {
				octal(&b, s[k])
			}
		}
		i += n
	}
	return b.String()
}

// cEscape are the single-letter escapes `ls -b` uses.
var cEscape = [0x80]byte{'\a': 'a', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't', '\v': 'v'}

func octal(b *strings.Builder, c byte) {
	b.WriteByte('\\')
	o := strconv.FormatUint(uint64(c), 8)
	b.WriteString(strings.Repeat("0", 3-len(o)))
	b.WriteString(o)
}

// safeAlready is the common case: printable ASCII without a backslash.
func safeAlready(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// safeList is Safe over a list, joined by sep.
func safeList(list []string, sep string) string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = Safe(s)
	}
	return strings.Join(out, sep)
}
