package rules

import (
	"testing"
)

// Every shipped rule's embedded tests pass.
func TestShippedRules(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatalf("shipped ruleset: %v", err)
	}
	for _, res := range set.RunTests() {
		if res.Failed() {
			t.Error(res.String())
		}
	}
}
