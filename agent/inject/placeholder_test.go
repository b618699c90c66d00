package inject

import (
	"bytes"
	"testing"
)

func TestPlaceholderHasTheSecretsShapeAndIsNeverIt(t *testing.T) {
	for _, secret := range []string{"ghp_AbCdEf0123456789xyzXYZ", "sk-live-0123abcd", "xoxb-1234-5678-abcdEFGH", "12", "A"} {
		for range 50 {
			p := Placeholder([]byte(secret))
			if bytes.Equal(p, []byte(secret)) || len(p) != len(secret) {
				t.Fatalf("%q: placeholder %q", secret, p)
			}
			for i := range p {
				a, b := secret[i], p[i]
				same := (a >= 'a' && a <= 'z') == (b >= 'a' && b <= 'z') && (a >= 'A' && a <= 'Z') == (b >= 'A' && b <= 'Z') && (a >= '0' && a <= '9') == (b >= '0' && b <= '9')
				if !same {
					t.Fatalf("%q: placeholder %q differs in kind at %d", secret, p, i)
				}
			}
		}
	}
	if p := Placeholder([]byte("ghp_AbCdEf0123456789xyzXYZ")); !bytes.HasPrefix(p, []byte("ghp_")) {
		t.Errorf("the kind prefix is not kept: %q", p)
	}
}
