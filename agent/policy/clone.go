package policy

import "maps"

// Clone returns a copy of p the caller may change without changing p: a policy kept for later
// calls (a launcher's cache of parsed files) hands out clones.
func (p *Policy) Clone() *Policy {
	c := *p
	c.Spec = cloneSpec(p.Spec)
	c.pos = maps.Clone(p.pos)
	return &c
}
