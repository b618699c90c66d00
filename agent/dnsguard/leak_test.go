package dnsguard

import (
	"testing"

	"github.com/bermsec/berm/agent/secrets"
)

// The labels a wildcard lets the tool choose read as encoded data when they are long, varied
// and switch between letters and digits as encoders' output does, however they are cut;
// names people and services choose do not.
func TestEncodedRunTellsPayloadFromNames(t *testing.T) {
	for _, tc := range []struct {
		sub  string
		want bool
	}{
		{"x7k2p9q4m1v8z3b6n5c0w2r7t4y9", true},
		{"x7k2.p9q4.m1v8.z3b6.n5c0.w2r7", true},                   // the same cut into labels of 4
		{"78646e73.36356137.64396431.33613033", true},             // hex
		{"4rixf.o3gsv.fnrd7.dmerw.4mc3x", true},                   // base32
		{"x.7.k.2.p.9.q.4.m.1.v.8.z.3.b.6.n.5.c.0.w.2.r.7", true}, // a label per character
		{"deadbeefcafebabe.deadbeefcafebabe", false},              // hex-shaped words, no digits between
		{"storage-googleapis-production", false},
		{"s3-website-us-east-1-amazonaws", false},
		{"my-load-balancer-1234567890.us-east-1.elb", false},
		{"the-quick-brown-fox-jumps-over-the-lazy-dog", false},
		{"api-v2.eu-central-1.prod-cluster-7", false},
		{"x7k2p9q4m1v8", false}, // short
		{"www", false},
	} {
		if got := encodedRun(tc.sub) != ""; got != tc.want {
			t.Errorf("%s: encoded %v, want %v (entropy %.2f)", tc.sub, got, tc.want, secrets.Entropy(tc.sub))
		}
	}
}
