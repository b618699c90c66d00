package access

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// file is two tenants: acme (runner uid 1001, group 2001 runs; group 3001 reads; uid 1005
// decides; strict and one file) and beta (uid 1002 runs, strict only).
func file() *File {
	return &File{Tenants: []*Tenant{
		{Name: "acme", Policies: []string{Strict, "/etc/berm/policies/acme-web.yaml"}, rights: map[Right]principals{
			Run:    {uids: []uint32{1001}, gids: []uint32{2001}},
			Read:   {gids: []uint32{3001}},
			Decide: {uids: []uint32{1005}},
		}},
		{Name: "beta", Policies: []string{Strict}, rights: map[Right]principals{
			Run: {uids: []uint32{1002, 1001}},
		}},
	}, UIDs: []uint32{1001, 1002, 1005}, GIDs: []uint32{2001, 3001}}
}

func TestCheckGrantsOnlyWhatTheFileNames(t *testing.T) {
	f := file()
	for _, tc := range []struct {
		name   string
		peer   Peer
		tenant string
		right  Right
		ok     bool
	}{
		{"root keeps every right in any tenant", Peer{UID: 0}, "zeta", Decide, true},
		{"a user named for run runs", Peer{UID: 1001}, "acme", Run, true},
		{"a member of a group named for run runs", Peer{UID: 4000, GIDs: []uint32{9, 2001}}, "acme", Run, true},
		{"run does not grant read", Peer{UID: 1001}, "acme", Read, false},
		{"a reader group member reads", Peer{UID: 4000, GIDs: []uint32{3001}}, "acme", Read, true},
		{"a reader may not decide", Peer{UID: 4000, GIDs: []uint32{3001}}, "acme", Decide, false},
		{"the decider decides", Peer{UID: 1005}, "acme", Decide, true},
		{"a runner of beta may not run in acme", Peer{UID: 1002}, "acme", Run, false},
		{"an unknown tenant grants nothing", Peer{UID: 1001}, "gamma", Run, false},
		{"a uid in no entry gets nothing", Peer{UID: 7777}, "acme", Run, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Check(tc.peer, tc.tenant, tc.right)
			if (err == nil) != tc.ok {
				t.Fatalf("Check(%+v, %s, %s) = %v, want ok=%v", tc.peer, tc.tenant, tc.right, err, tc.ok)
			}
			var r *Refusal
			if err != nil && (!errors.As(err, &r) || !strings.Contains(err.Error(), tc.tenant) || !strings.Contains(err.Error(), string(tc.right))) {
				t.Fatalf("refusal %q does not name the tenant %s and the right %s", err, tc.tenant, tc.right)
			}
		})
	}
}

func TestRunNamesTenantAndPolicy(t *testing.T) {
	f := file()
	for _, tc := range []struct {
		name, tenant, policy string
		peer                 Peer
		want                 string // "" allowed, else a part of the refusal
	}{
		{"the built-in strict policy is allowed where listed", "acme", "", Peer{UID: 1001}, ""},
		{"a listed policy file is allowed", "acme", "/etc/berm/policies/acme-web.yaml", Peer{UID: 1001}, ""},
		{"a listed policy file named through dots is the same file", "acme", "/etc/berm/policies/../policies/acme-web.yaml", Peer{UID: 1001}, ""},
		{"a policy the tenant does not list is refused", "acme", "/tmp/mine.yaml", Peer{UID: 1001}, "policy /tmp/mine.yaml is not one of the tenant's"},
		{"another tenant's policy is refused", "beta", "/etc/berm/policies/acme-web.yaml", Peer{UID: 1001}, "not one of the tenant's"},
		{"root names any policy", "acme", "/tmp/mine.yaml", Peer{UID: 0}, ""},
		{"no run right is refused before the policy", "acme", "", Peer{UID: 1002}, `no "run" right in tenant "acme"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Run(tc.peer, tc.tenant, tc.policy)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Run = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRunTenantIsTheOnlyOneUnlessNamed(t *testing.T) {
	f := file()
	for _, tc := range []struct {
		name  string
		peer  Peer
		named string
		want  string
		err   string
	}{
		{"the only tenant a caller runs in is its default", Peer{UID: 1002}, "", "beta", ""},
		{"a caller in two tenants must name one", Peer{UID: 1001}, "", "", "name one with --tenant"},
		{"a caller in none is refused", Peer{UID: 7777}, "", "", "no tenant grants it run"},
		{"a named tenant is taken as named (Run decides)", Peer{UID: 7777}, "acme", "acme", ""},
		{"root's default is default", Peer{UID: 0}, "", "default", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.RunTenant(tc.peer, tc.named)
			if got != tc.want || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("RunTenant = %q, %v; want %q, %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestKnownIsAnyoneTheFileNames(t *testing.T) {
	f := file()
	for _, tc := range []struct {
		peer Peer
		want bool
	}{{Peer{UID: 0}, true}, {Peer{UID: 1005}, true}, {Peer{UID: 9, GIDs: []uint32{3001}}, true}, {Peer{UID: 9, GIDs: []uint32{9}}, false}} {
		if got := f.Known(tc.peer); got != tc.want {
			t.Errorf("Known(%+v) = %v, want %v", tc.peer, got, tc.want)
		}
	}
	if RootOnly.Known(Peer{UID: 1001}) || !RootOnly.Known(Peer{UID: 0}) {
		t.Error("without a file only root is known")
	}
}

func TestParseReadsUsersGroupsAndPolicies(t *testing.T) {
	f, err := Parse("a.yaml", []byte(`apiVersion: berm.dev/v1alpha1
kind: Access
spec:
  tenants:
    - name: acme
      run: ["user:root", "group:root"]
      read: ["user:root"]
      policies: [strict, /etc/berm/../berm/p.yaml]
    - name: beta
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tenants) != 2 || f.Tenants[0].Policies[1] != "/etc/berm/p.yaml" || f.Tenants[1].Policies[0] != Strict {
		t.Fatalf("tenants: %+v %+v", f.Tenants[0], f.Tenants[1])
	}
	if err := f.Check(Peer{UID: 5, GIDs: []uint32{0}}, "acme", Run); err != nil {
		t.Fatalf("group:root grants run: %v", err)
	}
}

func TestParseErrorsSayWhere(t *testing.T) {
	head := "apiVersion: berm.dev/v1alpha1\nkind: Access\nspec:\n  tenants:\n    - name: acme\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"an unknown field", head + "      runn: [\"user:root\"]\n", `a.yaml:6:7: spec.tenants[0]: unknown field "runn"`},
		{"an unknown user", head + "      run: [\"user:no-such-user-berm\"]\n", `a.yaml:6:13: tenant acme.run: unknown user "no-such-user-berm"`},
		{"an unknown group", head + "      read: [\"group:no-such-group-berm\"]\n", `a.yaml:6:14: tenant acme.read: unknown group "no-such-group-berm"`},
		{"a principal of no kind", head + "      run: [root]\n", `a.yaml:6:13: tenant acme.run: expected user:NAME or group:NAME, got "root"`},
		{"a relative policy", head + "      policies: [web.yaml]\n", `a.yaml:6:18: tenant acme.policies: expected strict or an absolute policy file path`},
		{"another kind", "apiVersion: berm.dev/v1alpha1\nkind: Policy\nspec: {tenants: []}\n", `a.yaml:2:7: kind: expected Access, got "Policy"`},
		{"an unknown top field", "apiVersion: berm.dev/v1alpha1\nkind: Access\nspecs: {}\n", `a.yaml:3:1: unknown field "specs"`},
		{"a tenant twice", head + "    - name: acme\n", `a.yaml:6:13: spec.tenants[1].name: tenant "acme" given twice`},
		{"bad yaml", head + "      run: [\n", "a.yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("a.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadReadsTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "access.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: berm.dev/v1alpha1\nkind: Access\nspec:\n  tenants:\n    - {name: x, bogus: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p+":5:17: spec.tenants[0]: unknown field \"bogus\"") {
		t.Fatalf("Load = %v", err)
	}
}

// What bermd pays per connection of a caller that is not root: its groups read from the user
// database, and the decision.
func BenchmarkPeerOfAndRun(b *testing.B) {
	f := file()
	for b.Loop() {
		p := PeerOf(65534)
		_ = f.Run(p, "acme", "")
	}
}
