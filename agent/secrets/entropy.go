package secrets

import "math"

// Entropy is s's Shannon entropy in bits per byte (0 for ""): how random a name or a value
// looks, for the rules' entropy() and DNS tunnelling's label runs.
func Entropy(s string) float64 {
	if s == "" {
		return 0
	}
	var n [256]int
	for i := 0; i < len(s); i++ {
		n[s[i]]++
	}
	h := 0.0
	for _, c := range n {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}
