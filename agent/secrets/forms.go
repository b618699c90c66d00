package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
)

// Encodings a secret is looked for in.
const (
	Raw       = "raw"
	Base64    = "base64"
	Base64URL = "base64url"
	Hex       = "hex"
	URL       = "url"
	JSON      = "json"
)

// Form is a secret as it shows in one encoding.
type Form struct {
	Encoding string
	Bytes    []byte
}

// minForm is the shortest form looked for: shorter ones would match by chance.
const minForm = 6

// Forms are the byte strings a secret shows as: itself, hex (both cases), URL- and
// JSON-escaped, and base64 and base64url at each of the three alignments a value can have
// inside a longer encoded text (base64 of "user:SECRET" carries SECRET at offset 5): for each,
// the characters that depend on the secret's bytes alone.
func Forms(value []byte) []Form {
	var out []Form
	add := func(enc string, b []byte) {
		if len(b) < minForm {
			return
		}
		for _, f := range out {
			if bytes.Equal(f.Bytes, b) {
				return
			}
		}
		out = append(out, Form{enc, b})
	}
	add(Raw, value)
	for _, e := range []struct {
		name string
		enc  *base64.Encoding
	}{{Base64, base64.RawStdEncoding}, {Base64URL, base64.RawURLEncoding}} {
		for k := 0; k < 3; k++ {
			buf := make([]byte, k+len(value)+2)
			copy(buf[k:], value)
			s := e.enc.EncodeToString(buf)
			start := (8*k + 5) / 6
			end := 8 * (k + len(value)) / 6
			if end > start {
				add(e.name, []byte(s[start:end]))
			}
		}
	}
	h := hex.EncodeToString(value)
	add(Hex, []byte(h))
	add(Hex, bytes.ToUpper([]byte(h)))
	add(URL, []byte(url.QueryEscape(string(value))))
	add(URL, []byte(url.PathEscape(string(value))))
	if j, err := json.Marshal(string(value)); err == nil {
		add(JSON, j[1:len(j)-1])
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(string(value)) == nil {
		j := bytes.TrimSpace(b.Bytes())
		add(JSON, j[1:len(j)-1])
	}
	return out
}
