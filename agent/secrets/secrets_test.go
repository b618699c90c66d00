package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const secret = `s3cr3t-T0ken/with+odd&chars"\`

// encoded are the ways a tool would print the secret, each inside other text.
func encoded() map[string]string {
	return map[string]string{
		"raw":               "token=" + secret + " end",
		"base64":            "b64 " + base64.StdEncoding.EncodeToString([]byte(secret)) + "\n",
		"base64 of a field": "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+secret)) + "\n",
		"base64 offset 2":   base64.StdEncoding.EncodeToString([]byte("ab"+secret+"zz")) + "\n",
		"base64url":         base64.RawURLEncoding.EncodeToString([]byte("x"+secret)) + "\n",
		"hex":               "hex:" + hex.EncodeToString([]byte(secret)) + ".",
		"HEX":               strings.ToUpper(hex.EncodeToString([]byte(secret))),
		"url":               "https://h/?t=" + url.QueryEscape(secret) + "&x=1",
		"json":              `{"token":"s3cr3t-T0ken/with+odd&chars\"\\"}`,
	}
}

func redactAll(t *testing.T, writes [][]byte, pats []Pattern) (string, []Match) {
	t.Helper()
	var out bytes.Buffer
	var ms []Match
	var lits []Literal
	for _, f := range Forms([]byte(secret)) {
		lits = append(lits, Literal{Name: "db", Form: f})
	}
	r := NewRedactor(&out, lits, pats, func(m Match) { ms = append(ms, m) })
	for _, w := range writes {
		r.Write(w)
	}
	r.Close()
	return out.String(), ms
}

func TestRedactEveryEncodingAtEverySplit(t *testing.T) {
	for name, text := range encoded() {
		for cut := 0; cut <= len(text); cut++ {
			got, ms := redactAll(t, [][]byte{[]byte(text[:cut]), []byte(text[cut:])}, nil)
			if len(ms) == 0 || !strings.Contains(got, "[berm:redacted:db]") {
				t.Fatalf("%s cut at %d: not redacted: %q", name, cut, got)
			}
			for _, f := range Forms([]byte(secret)) {
				if strings.Contains(got, string(f.Bytes)) {
					t.Fatalf("%s cut at %d: %s form left in %q", name, cut, f.Encoding, got)
				}
			}
		}
	}
	// byte by byte
	text := encoded()["raw"]
	var writes [][]byte
	for i := range len(text) {
		writes = append(writes, []byte{text[i]})
	}
	if got, _ := redactAll(t, writes, nil); got != "token=[berm:redacted:db] end" {
		t.Fatalf("byte by byte: %q", got)
	}
}

func TestRedactPassesTheRest(t *testing.T) {
	// A prefix of the secret that never completes comes out at the end, whole.
	got, ms := redactAll(t, [][]byte{[]byte("abc s3cr3t-T0"), []byte("k")}, nil)
	if got != "abc s3cr3t-T0k" || len(ms) != 0 {
		t.Fatalf("got %q %v", got, ms)
	}
	// Nothing like the secret: everything passes at once, nothing held.
	var out bytes.Buffer
	r := NewRedactor(&out, []Literal{{Name: "db", Form: Form{Raw, []byte(secret)}}}, nil, nil)
	r.Write([]byte("hello world\n"))
	if out.String() != "hello world\n" {
		t.Fatalf("held back %q", out.String())
	}
}

func TestRedactPatterns(t *testing.T) {
	pats := []Pattern{
		{Name: "aws-access-key-id", Regex: regexp.MustCompile(`\b(AKIA|ASIA)[0-9A-Z]{16}\b`)},
		{Name: "private-key", Regex: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`), End: regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)},
	}
	key := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234\nabcdEFGH5678\n-----END RSA PRIVATE KEY-----\n"
	text := "id AKIAABCDEFGHIJKLMNOP here\nbefore\n" + key + "after\n"
	for cut := 0; cut <= len(text); cut++ {
		got, ms := redactAll(t, [][]byte{[]byte(text[:cut]), []byte(text[cut:])}, pats)
		want := "id [berm:redacted:aws-access-key-id] here\nbefore\n[berm:redacted:private-key]\nafter\n"
		if got != want || len(ms) != 2 {
			t.Fatalf("cut at %d: got %q (%d matches), want %q", cut, got, len(ms), want)
		}
	}
	// A partial line goes out once the output pauses (a prompt).
	var out bytes.Buffer
	r := NewRedactor(&out, nil, pats, nil)
	r.Write([]byte("Password: "))
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		s := out.String()
		r.mu.Unlock()
		if s == "Password: " {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partial line never flushed: %q", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegistryScrub(t *testing.T) {
	fp, err := LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(fp)
	if s, h := r.Scrub("x " + secret); h != nil || s != "x "+secret {
		t.Fatal("empty registry found something")
	}
	remove := r.Add(Owner{CallKey: "k1", Name: "db"}, []byte(secret))
	s, h := r.Scrub("/tmp/" + url.PathEscape(secret) + "/x")
	if len(h) != 1 || h[0].CallKey != "k1" || strings.Contains(s, "T0ken") {
		t.Fatalf("got %q %+v", s, h)
	}
	remove()
	remove()
	if r.Live() {
		t.Fatal("still live after remove")
	}
}

func TestKey(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Of([]byte("x")) != b.Of([]byte("x")) || a.Of([]byte("x")) == a.Of([]byte("y")) || len(a.Of([]byte("x"))) != 32 {
		t.Fatal("fingerprints")
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("key file mode: %v %v", st, err)
	}
	other, _ := LoadKey(t.TempDir())
	if other.Of([]byte("x")) == a.Of([]byte("x")) {
		t.Fatal("two nodes' keys give the same fingerprint")
	}
}

func TestAnchors(t *testing.T) {
	for _, tc := range []struct {
		re   string
		want []string
	}{
		{`\b(AKIA|ASIA)[0-9A-Z]{16}\b`, []string{"KIA", "SIA"}}, // the common A factored out
		{`(?i)\bbearer[ \t]+[A-Za-z0-9._~+/-]{16,}=*`, []string{"bearer"}},
		{`-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----`, []string{"-----BEGIN "}},
		{`[a-z]+@[a-z]+`, nil},
		{`x|[0-9]+`, nil},
	} {
		var got []string
		for _, a := range anchorsOf(tc.re) {
			got = append(got, string(a.lit))
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: got %q, want %q", tc.re, got, tc.want)
		}
	}
}

func TestFinderFindsALiteralCutAcrossPieces(t *testing.T) {
	lits := []Literal{}
	for _, f := range Forms([]byte("ph-4d1f9a7c2b")) {
		lits = append(lits, Literal{Name: "api", Form: f})
	}
	for _, tc := range []struct {
		name   string
		pieces []string
		at     int // the piece the literal ends in; -1: none
		enc    string
	}{
		{"a literal in one piece", []string{"GET / HTTP/1.1\r\nX: ph-4d1f9a7c2b\r\n"}, 0, Raw},
		{"a literal cut across two pieces", []string{"X: ph-4d1f", "9a7c2b\r\n"}, 1, Raw},
		{"a literal cut across many one-byte pieces", strings.Split("X: ph-4d1f9a7c2b", ""), 15, Raw},
		{"a base64 form cut across pieces", []string{"Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("u:ph-4d1f9a7c2b"))[:9], base64.StdEncoding.EncodeToString([]byte("u:ph-4d1f9a7c2b"))[9:]}, 1, Base64},
		{"no literal", []string{"GET / HTTP/1.1\r\n", "ph-4d1f9a7c2", "\r\n"}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFinder(lits)
			at, enc := -1, ""
			for i, p := range tc.pieces {
				if l, ok := f.Next([]byte(p)); ok {
					at, enc = i, l.Encoding
					break
				}
			}
			if at != tc.at || enc != tc.enc {
				t.Errorf("found in piece %d (%q), want %d (%q)", at, enc, tc.at, tc.enc)
			}
		})
	}
}
