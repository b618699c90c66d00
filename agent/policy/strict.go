package policy

import (
	_ "embed"
	"maps"
	"slices"
	"sync"
)

//go:embed strict.yaml
var strictYAML []byte

// StrictYAML is the text of the built-in strict policy, for `berm policy show` and for users
// to copy.
func StrictYAML() []byte { return slices.Clone(strictYAML) }

var strict = sync.OnceValue(func() *Policy {
	p, err := parse("<strict>", strictYAML, nil)
	if err != nil {
		panic("policy: built-in strict policy is invalid: " + err.Error())
	}
	return p
})

// Strict returns the built-in strict policy (a copy the caller may change).
func Strict() *Policy {
	s := strict()
	c := *s
	c.Spec = cloneSpec(s.Spec)
	c.pos = maps.Clone(s.pos)
	return &c
}

func cloneSpec(s Spec) Spec {
	c := s
	c.Isolation.Capabilities = slices.Clone(s.Isolation.Capabilities)
	c.Filesystem.Read = slices.Clone(s.Filesystem.Read)
	c.Filesystem.Write = slices.Clone(s.Filesystem.Write)
	c.Filesystem.Exec = slices.Clone(s.Filesystem.Exec)
	c.Filesystem.Deny = slices.Clone(s.Filesystem.Deny)
	c.Network.Egress = slices.Clone(s.Network.Egress)
	c.Approvals.Rules = slices.Clone(s.Approvals.Rules)
	for i := range c.Network.Egress {
		c.Network.Egress[i].Ports = slices.Clone(s.Network.Egress[i].Ports)
	}
	c.Syscalls.Deny = slices.Clone(s.Syscalls.Deny)
	c.Syscalls.Allow = slices.Clone(s.Syscalls.Allow)
	c.Syscalls.Fatal = slices.Clone(s.Syscalls.Fatal)
	c.Credentials = slices.Clone(s.Credentials)
	for i := range c.Credentials {
		c.Credentials[i].Source.Exec = slices.Clone(s.Credentials[i].Source.Exec)
		c.Credentials[i].Revoke = slices.Clone(s.Credentials[i].Revoke)
	}
	c.Output.Redact = slices.Clone(s.Output.Redact)
	return c
}
