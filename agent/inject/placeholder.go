package inject

import (
	"bytes"
	"crypto/rand"
	"math/big"
)

// Placeholder is a per-call stand-in of secret's shape: as long, each letter a random letter
// of the same case, each digit a random digit, everything else kept, and a short leading
// prefix that names the token kind (ghp_, sk-, xoxb-) kept whole, so a tool checking a
// token's format accepts it. It is never equal to the secret.
func Placeholder(secret []byte) []byte {
	keep := prefixLen(secret)
	for {
		out := make([]byte, len(secret))
		copy(out, secret[:keep])
		for i := keep; i < len(secret); i++ {
			out[i] = randomLike(secret[i])
		}
		if !bytes.Equal(out, secret) {
			return out
		}
	}
}

// prefixLen is the length of a leading kind prefix: up to 5 lowercase letters, then '_' or '-'.
func prefixLen(s []byte) int {
	for i := 0; i < len(s) && i < 6; i++ {
		c := s[i]
		if (c == '_' || c == '-') && i > 0 && i+8 < len(s) {
			return i + 1
		}
		if c < 'a' || c > 'z' {
			return 0
		}
	}
	return 0
}

func randomLike(c byte) byte {
	pick := func(from string) byte {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(from))))
		if err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		return from[n.Int64()]
	}
	switch {
	case c >= 'a' && c <= 'z':
		return pick("abcdefghijklmnopqrstuvwxyz")
	case c >= 'A' && c <= 'Z':
		return pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	case c >= '0' && c <= '9':
		return pick("0123456789")
	}
	return c
}
