package secrets

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
)

// chunked is s cut into labels of n characters joined by sep.
func chunked(s string, n int, sep string) string {
	var labels []string
	for len(s) > n {
		labels, s = append(labels, s[:n]), s[n:]
	}
	return strings.Join(append(labels, s), sep)
}

func reversed(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// A chunk of a live secret in a DNS name is found in every encoding a tunnel uses, cut over
// labels, in any case, at any offset; names of no secret are left alone.
func TestInNameFindsChunksOfALiveSecretInEveryEncoding(t *testing.T) {
	value := "Tok3n-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	r := NewRegistry(nil)
	defer r.Add(Owner{CallKey: "k1", Name: "db"}, []byte(value))()
	b32 := func(b string) string {
		return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(b)))
	}
	for _, tc := range []struct {
		name, query, enc string
	}{
		{"the whole secret", value + ".t.allowed.test", Raw},
		{"a raw chunk in upper case", strings.ToUpper(value[10:22]) + ".t.allowed.test", Raw},
		{"raw chunks of 4 over labels", chunked(value[5:25], 4, ".") + ".t.allowed.test", Raw},
		{"reversed", reversed(value)[3:20] + ".t.allowed.test", Reversed},
		{"hex of a chunk", hex.EncodeToString([]byte(value[7:19])) + ".allowed.test", Hex},
		{"hex cut by hyphens", chunked(hex.EncodeToString([]byte(value[3:15])), 3, "-") + ".allowed.test", Hex},
		{"hex of the reversed secret", hex.EncodeToString([]byte(reversed(value)))[:20] + ".allowed.test", HexReversed},
		{"base32 of a chunk at offset 3", b32(value[3:20]) + ".allowed.test", Base32},
		{"base32 of a chunk at offset 11", chunked(b32(value[11:30]), 5, ".") + ".allowed.test", Base32},
		{"extended-hex base32", strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(value[2:14]))) + ".allowed.test", Base32},
		{"6 raw characters, letters and digits", "9f8e7d.allowed.test", Raw},
		{"base64url of a chunk (the same letters as base64)", base64.RawURLEncoding.EncodeToString([]byte(value[4:20])) + ".allowed.test", Base64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, hits := r.InName(tc.query)
			if len(hits) == 0 {
				t.Fatalf("%s: not found", tc.query)
			}
			if hits[0].Name != "db" || hits[0].CallKey != "k1" || hits[0].Encoding != tc.enc {
				t.Errorf("%s: hits %+v, want db (%s)", tc.query, hits, tc.enc)
			}
			if !strings.Contains(out, "[berm:redacted:db]") || !strings.HasSuffix(out, "allowed.test") {
				t.Errorf("%s redacted as %s", tc.query, out)
			}
			// nothing of ChunkLen of the secret's forms is left in what is recorded
			if _, again := r.InName(strings.ReplaceAll(out, "[berm:redacted:db]", ".")); again != nil {
				t.Errorf("%s redacted as %s: a chunk is left (%+v)", tc.query, out, again)
			}
		})
	}
	for _, q := range []string{"api.github.com", "storage-googleapis-production.example.com", "my-load-balancer-1234567890.us-east-1.elb.amazonaws.com",
		"tok3n.example", "x7k2p9q4m1v8z3b6n5c0w2r7t4y9.files.example"} {
		if out, hits := r.InName(q); hits != nil || out != q {
			t.Errorf("%s: found %+v (%s)", q, hits, out)
		}
	}
}

// A secret shorter than a chunk is found whole; none is found once its call is gone.
func TestInNameShortSecretsWholeAndOnlyWhileLive(t *testing.T) {
	r := NewRegistry(nil)
	remove := r.Add(Owner{CallKey: "k", Name: "pin"}, []byte("a1b2c3d"))
	if out, hits := r.InName("x.A1B2C3D.example"); len(hits) != 1 || out != "x.[berm:redacted:pin].example" {
		t.Errorf("short secret: %s %+v", out, hits)
	}
	remove()
	if _, hits := r.InName("x.a1b2c3d.example"); hits != nil {
		t.Errorf("found after its call ended: %+v", hits)
	}
}

// BenchmarkInName is the cost the resolver adds to each query of a node holding 16 live
// secrets, for a name of no secret.
func BenchmarkInName(b *testing.B) {
	r := NewRegistry(nil)
	for i := range 16 {
		defer r.Add(Owner{CallKey: "k", Name: "s"}, []byte(strings.Repeat(string(rune('a'+i)), 3)+"-9f8e7d6c5b4a39281706f5e4d3c2b1a0"+hex.EncodeToString([]byte{byte(i)})))()
	}
	r.InName("warm.example")
	b.ReportAllocs()
	for b.Loop() {
		r.InName("x7k2p9q4m1v8z3b6n5c0w2r7t4y9.files.storage-googleapis-production.example.com")
	}
}
