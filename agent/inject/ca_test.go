package inject

import (
	"fmt"
	"testing"
	"time"
)

func TestACallsCAKeepsABoundedNumberOfLeaves(t *testing.T) {
	c, err := newCA("acme/call", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.leaf("a.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.leaf("a.example.com"); again != first {
		t.Error("a server name's certificate was made again, want it kept")
	}
	for i := range 3 * maxLeaves {
		if _, err := c.leaf(fmt.Sprintf("n%d.example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.leaves); n > maxLeaves {
		t.Errorf("the call's CA keeps %d certificates after %d server names, want at most %d", n, 3*maxLeaves+1, maxLeaves)
	}
	c.revoke()
	if _, err := c.leaf("b.example.com"); err == nil {
		t.Error("a revoked CA made a certificate")
	}
}
