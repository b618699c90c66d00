package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCredentials(t *testing.T) {
	p, err := Parse("p.yaml", []byte(header+`spec:
  credentials:
    - name: github
      source: {file: /etc/berm/secrets/github}
      deliver: {env: GITHUB_TOKEN}
    - name: db
      source: {exec: [/usr/local/bin/mint-db-token, --ttl, 5m]}
      deliver: {file: /run/secrets/db}
      revoke: {exec: [/usr/local/bin/revoke-db-token]}
      ttl: 5m
      runAs: berm-broker
    - name: from-env
      source: {env: UPSTREAM_TOKEN}
      deliver: {file: /run/secrets/up}
  output:
    redact:
      - {name: internal-id, regex: 'INT-[0-9]{8}'}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Credential{
		{Name: "github", Source: CredentialSource{File: "/etc/berm/secrets/github"}, Deliver: CredentialDelivery{Env: "GITHUB_TOKEN"}},
		{Name: "db", Source: CredentialSource{Exec: []string{"/usr/local/bin/mint-db-token", "--ttl", "5m"}}, Deliver: CredentialDelivery{File: "/run/secrets/db"},
			Revoke: []string{"/usr/local/bin/revoke-db-token"}, TTL: 5 * time.Minute, RunAs: "berm-broker"},
		{Name: "from-env", Source: CredentialSource{Env: "UPSTREAM_TOKEN"}, Deliver: CredentialDelivery{File: "/run/secrets/up"}},
	}
	got := p.Spec.Credentials
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Source.File != w.Source.File || g.Source.Env != w.Source.Env || !slices.Equal(g.Source.Exec, w.Source.Exec) ||
			g.Deliver != w.Deliver || !slices.Equal(g.Revoke, w.Revoke) || g.TTL != w.TTL || g.RunAs != w.RunAs {
			t.Errorf("credential %d: got %+v, want %+v", i, g, w)
		}
	}
	if r := p.Spec.Output.Redact; len(r) != 1 || r[0] != (RedactPattern{Name: "internal-id", Regex: "INT-[0-9]{8}"}) {
		t.Errorf("redact: %+v", r)
	}
	// The strict policy's defaults: no credentials, the default redaction set.
	s := Strict().Spec
	if len(s.Credentials) != 0 {
		t.Errorf("strict credentials: %+v", s.Credentials)
	}
	var names []string
	for _, r := range s.Output.Redact {
		names = append(names, r.Name)
	}
	for _, n := range []string{"aws-access-key-id", "aws-secret-access-key", "github-token", "bearer-token", "private-key"} {
		if !slices.Contains(names, n) {
			t.Errorf("strict redacts %v, not %s", names, n)
		}
	}
}

func TestParseCredentialErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"two sources", header + "spec:\n  credentials:\n    - name: a\n      source: {file: /x, env: X}\n      deliver: {env: A}\n",
			[]string{`p.yaml:8:15: spec.credentials[0].source: expected exactly one of file, env or exec, got 2`}},
		{"no delivery, bad name", header + "spec:\n  credentials:\n    - name: A B\n      source: {env: X}\n",
			[]string{`p.yaml:7:13: spec.credentials[0].name: expected a name of at most 63 lowercase letters, digits, '-', '.', '_', got "A B"`,
				`p.yaml:7:7: spec.credentials[0].deliver: required field missing`}},
		{"run as root", header + "spec:\n  credentials:\n    - name: a\n      source: {env: X}\n      deliver: {env: A}\n      runAs: root\n",
			[]string{`p.yaml:10:14: spec.credentials[0].runAs: expected the name of a user other than root, like nobody, got "root"`}},
		{"relative exec", header + "spec:\n  credentials:\n    - name: a\n      source: {exec: [mint]}\n      deliver: {env: A}\n",
			[]string{`p.yaml:8:22: spec.credentials[0].source.exec: expected a command starting with an absolute program path, like [/usr/local/bin/mint-token, --ttl, 5m]`}},
		{"bad env and path", header + "spec:\n  credentials:\n    - name: a\n      source: {file: ../x}\n      deliver: {env: 1A}\n",
			[]string{`p.yaml:8:22: spec.credentials[0].source.file: expected a clean absolute path of a file (no placeholders, '.', '..', '//' or trailing '/'), got "../x"`,
				`p.yaml:9:22: spec.credentials[0].deliver.env: expected an environment variable name like GITHUB_TOKEN, got "1A"`}},
		{"file under a grant", header + "spec:\n  credentials:\n    - name: a\n      source: {env: X}\n      deliver: {file: /etc/token}\n",
			[]string{`p.yaml:9:23: spec.credentials[0].deliver.file: expected a file in a directory the policy grants nothing in or under (it gets a tmpfs of its own), got /etc/token: /etc is granted`}},
		{"twice", header + "spec:\n  credentials:\n    - {name: a, source: {env: X}, deliver: {env: T}}\n    - {name: a, source: {env: Y}, deliver: {env: T}}\n",
			[]string{`p.yaml:8:14: spec.credentials[1].name: credential a listed twice`, `p.yaml:8:50: spec.credentials[1].deliver.env: T delivered twice`}},
		{"bad regex", header + "spec:\n  output:\n    redact:\n      - {name: x, regex: 'a(', end: 'b*'}\n",
			[]string{"p.yaml:8:26: spec.output.redact[0].regex: expected a regular expression (RE2), got \"a(\": error parsing regexp: missing closing ): `a(`",
				`p.yaml:8:37: spec.output.redact[0].end: expected a pattern that does not match the empty string, got "b*"`}},
		{"ttl", header + "spec:\n  credentials:\n    - {name: a, source: {env: X}, deliver: {env: T}, ttl: forever}\n",
			[]string{`p.yaml:7:59: spec.credentials[0].ttl: expected a duration like 5m or 90s, got "forever"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("got %v, want Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
