package approval

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape is s as it may be shown to a person, on a terminal or anywhere else: every byte
// that is not printable text shows as an escape instead of acting. Control characters
// (ESC, CR, BS, DEL, the C1 range, CSI U+009B among them), format characters (bidi
// overrides, zero-width spaces), non-ASCII spaces and invalid UTF-8 become \xHH or \uHHHH
// (\t, \n and \r by their names), and a backslash becomes \\: the escaped text says
// unambiguously what the bytes are, and a name the tool chose cannot move the cursor, erase
// a line or reorder what is read (customers.db\e[12D\e[Kcache.tmp shows as itself).
func Escape(s string) string {
	return escape(s, true)
}

// EscapeControls is Escape leaving backslashes as they are: for text escaped once already
// (what the API returns), shown again without doubling its escapes.
func EscapeControls(s string) string {
	return escape(s, false)
}

func escape(s string, backslash bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || (backslash && c == '\\') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x80 || unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// escaped is r with every field a person reads escaped (Escape): what the broker publishes
// (its log, the webhook, the API, the prompt).
func (r *Request) escaped() {
	r.Tool, r.Tenant, r.CallID = Escape(r.Tool), Escape(r.Tenant), Escape(r.CallID)
	r.Action, r.Syscall, r.Object, r.Rule = Escape(r.Action), Escape(r.Syscall), Escape(r.Object), Escape(r.Rule)
	if r.Approvers != nil {
		as := make([]string, len(r.Approvers)) // the rule's own slice stays as it is
		for i, a := range r.Approvers {
			as[i] = Escape(a)
		}
		r.Approvers = as
	}
}
