package policy

import "testing"

func TestStrictParses(t *testing.T) {
	p := Strict()
	t.Logf("%+v", p.Spec)
}
