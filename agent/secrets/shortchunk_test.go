package secrets

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"
)

// A chunk of ShortChunkLen (6) characters of a live random token is found raw, reversed, in
// base32 and in base64 when it mixes letters and digits; shorter chunks, 6 letters alone and
// 6 hex characters are not (README.md: their false positives).
func TestInNameSixCharacterChunks(t *testing.T) {
	const value = "q7Vx2LmP9aRt4KcZ8wNb1YeH6uJd"
	r := NewRegistry(nil)
	defer r.Add(Owner{CallKey: "TestInNameSixCharacterChunks", Name: "tok"}, []byte(value))()
	b32 := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(value[5:])))
	b64 := base64.RawStdEncoding.EncodeToString([]byte(value[6:]))
	for _, tc := range []struct {
		name, query, enc string // enc "": not found
	}{
		{"a 6-character raw chunk is refused", "x2LmP9.t.allowed.test", Raw},
		{"a 6-character raw chunk cut over labels is refused", "x2l.mp9.t.allowed.test", Raw},
		{"a 6-character reversed chunk is refused", "4tra9p.allowed.test", Reversed},
		{"6 base32 characters are refused", mixedRun(t, b32[1:len(b32)-1]) + ".allowed.test", Base32},
		{"6 base64 characters are refused", mixedRun(t, b64[1:len(b64)-1]) + ".allowed.test", Base64},
		{"5 raw characters are not found", "x2lmp.allowed.test", ""},
		{"6 hex characters are not found", hex.EncodeToString([]byte(value[4:7])) + ".allowed.test", ""},
		{"8 hex characters are refused", hex.EncodeToString([]byte(value[4:8])) + ".allowed.test", Hex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, hits := r.InName(tc.query)
			if tc.enc == "" {
				if hits != nil {
					t.Fatalf("%s: found %+v (%s)", tc.query, hits, out)
				}
				return
			}
			if len(hits) == 0 || hits[0].Name != "tok" || hits[0].Encoding != tc.enc {
				t.Fatalf("%s: hits %+v, want tok (%s)", tc.query, hits, tc.enc)
			}
			if !strings.Contains(out, "[berm:redacted:tok]") {
				t.Errorf("%s redacted as %s", tc.query, out)
			}
		})
	}
}

// mixedRun is the first 6 characters in a row of s that mix letters and digits.
func mixedRun(t *testing.T, s string) string {
	for i := 0; i+ShortChunkLen <= len(s); i++ {
		if shortChunkable(Raw, normalize([]byte(s[i:i+ShortChunkLen]))) {
			return s[i : i+ShortChunkLen]
		}
	}
	t.Fatalf("no run of letters and digits in %s", s)
	return ""
}

// ordinaryNames are what tools ask every day: registries, code hosts, CDNs with hashed
// labels, cloud host names with digits.
var ordinaryNames = []string{
	"www.github.com", "api.github.com", "objects.githubusercontent.com", "codeload.github.com",
	"pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com",
	"proxy.golang.org", "sum.golang.org", "index.crates.io", "static.crates.io", "rubygems.org",
	"repo1.maven.org", "dl-cdn.alpinelinux.org", "deb.debian.org", "archive.ubuntu.com",
	"d3f1a9b2c7e4.cloudfront.net", "d1q2w3e4r5t6y7.cloudfront.net",
	"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.r2.cloudflarestorage.com",
	"a1b2c3d4e5f60718293a4b5c6d7e8f9012345678.objects.example-cdn.net",
	"s3.us-east-1.amazonaws.com", "my-load-balancer-1234567890.us-east-1.elb.amazonaws.com",
	"ec2-54-123-45-67.compute-1.amazonaws.com", "storage.googleapis.com", "fonts.gstatic.com",
	"cdn.jsdelivr.net", "unpkg.com", "huggingface.co", "cdn-lfs.hf.co", "ghcr.io",
	"pkg-containers.githubusercontent.com", "production.cloudflare.docker.com", "auth.docker.io",
	"login.microsoftonline.com", "oauth2.googleapis.com", "sts.amazonaws.com", "x509.example.org",
	"ipv4only.arpa", "1.0.0.127.in-addr.arpa", "_http._tcp.deb.debian.org", "ns1.p30.dynect.net",
}

// With many live random tokens (20 to 40 characters, the brokered secrets berm sees), no
// ordinary name is refused: the chance one of their 6-character runs is a chunk of a token
// is one in about 2*10^9 per run and form (README.md). The tokens come from a fixed seed:
// the test is the same every run.
func TestInNameOrdinaryNamesAreNotRefused(t *testing.T) {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	rng := rand.New(rand.NewPCG(23, 6))
	r := NewRegistry(nil)
	for i := range 200 {
		b := make([]byte, 20+rng.IntN(21))
		for j := range b {
			b[j] = alnum[rng.IntN(len(alnum))]
		}
		defer r.Add(Owner{CallKey: "TestInNameOrdinaryNamesAreNotRefused", Name: "tok" + string(rune('a'+i%26))}, b)()
	}
	for _, name := range ordinaryNames {
		t.Run(name, func(t *testing.T) {
			if out, hits := r.InName(name); hits != nil {
				t.Errorf("refused: %+v (%s)", hits, out)
			}
		})
	}
}
