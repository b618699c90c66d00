package policy

import (
	"slices"
	"strings"
	"testing"
)

// extends: strict, and a list's additive form: {add, remove} changes strict's list instead of
// replacing it, so a policy adding one deny entry keeps strict's thirty; a removal is named
// by berm policy check, and one of an entry strict does not have is an error.
func TestAdditiveListsExtendStrict(t *testing.T) {
	strict := Strict().Spec
	for _, c := range []struct {
		name    string
		spec    string
		err     string
		check   func(t *testing.T, p *Policy)
		dropped []string
	}{
		{name: "adding a deny entry keeps strict's", spec: "  filesystem:\n    deny:\n      add: [/srv/secrets]\n",
			check: func(t *testing.T, p *Policy) {
				want := append(slices.Clone(strict.Filesystem.Deny), "/srv/secrets")
				if !slices.Equal(p.Spec.Filesystem.Deny, want) {
					t.Errorf("deny %v, want strict's and /srv/secrets", p.Spec.Filesystem.Deny)
				}
			}},
		{name: "removing one is named", spec: "  filesystem:\n    deny:\n      remove: [/etc/ssl/private]\n",
			check: func(t *testing.T, p *Policy) {
				if slices.Contains(p.Spec.Filesystem.Deny, "/etc/ssl/private") || len(p.Spec.Filesystem.Deny) != len(strict.Filesystem.Deny)-1 {
					t.Errorf("deny %v", p.Spec.Filesystem.Deny)
				}
			}, dropped: []string{"spec.filesystem.deny drops strict's /etc/ssl/private"}},
		{name: "syscalls too", spec: "  syscalls:\n    deny: {add: [getpid], remove: [ptrace]}\n",
			check: func(t *testing.T, p *Policy) {
				if !slices.Contains(p.Spec.Syscalls.Deny, "getpid") || slices.Contains(p.Spec.Syscalls.Deny, "ptrace") || !slices.Contains(p.Spec.Syscalls.Deny, "mount") {
					t.Errorf("syscalls deny %v", p.Spec.Syscalls.Deny)
				}
			}, dropped: []string{"spec.syscalls.deny drops strict's ptrace"}},
		{name: "removing what strict does not have", spec: "  filesystem:\n    deny:\n      remove: [/etc/sshh]\n", err: "spec.filesystem.deny.remove[0]: /etc/sshh is not in the parent policy's list"},
		{name: "an unknown key of the form", spec: "  filesystem:\n    deny:\n      append: [/x]\n", err: "append"},
		{name: "extends strict", spec: "  mode: enforce\n", check: func(t *testing.T, p *Policy) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := header + "extends: strict\nspec:\n" + c.spec
			p, err := Parse("p.yaml", []byte(text))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, p)
			if got := p.Dropped(); !slices.Equal(got, c.dropped) {
				t.Errorf("dropped %q, want %q", got, c.dropped)
			}
		})
	}
	if _, err := Parse("p.yaml", []byte(header+"extends: permissive\nspec:\n  mode: enforce\n")); err == nil || !strings.Contains(err.Error(), "extends") {
		t.Errorf("extends of an unknown parent: %v", err)
	}
}
