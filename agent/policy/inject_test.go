package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const injectHeader = header + "spec:\n  isolation: {network: host-filtered}\n  credentials:\n"

func TestParseInjectedCredentials(t *testing.T) {
	p, err := Parse("p.yaml", []byte(injectHeader+`    - name: api
      source: {env: API_TOKEN}
      deliver: {env: API_TOKEN, inject: {hosts: [API.Example.com., uploads.example.com], header: x-api-key, format: "{}"}}
    - name: gh
      source: {env: GH}
      deliver: {file: /run/secrets/gh, inject: {hosts: [api.github.com]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Spec.Credentials
	if in := got[0].Deliver.Inject; in == nil || !slices.Equal(in.Hosts, []string{"api.example.com", "uploads.example.com"}) || in.Header != "X-Api-Key" || in.Format != "{}" {
		t.Errorf("api: %+v", got[0].Deliver.Inject)
	}
	if in := got[1].Deliver.Inject; in == nil || in.Header != "Authorization" || in.Format != "Bearer {}" || got[1].Deliver.File != "/run/secrets/gh" {
		t.Errorf("gh: defaults not applied: %+v", got[1].Deliver.Inject)
	}
	c, err := p.Compile(CompileEnv{Workspace: t.TempDir(), Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, d := range c.Network.Domains {
		if d.Inject != "" {
			hosts = append(hosts, d.Inject+"@"+d.Pattern)
			if d.Proto != ProtoTCP || !slices.Equal(d.Ports, []PortRange{{443, 443}, {80, 80}}) {
				t.Errorf("%s: proto %d ports %v, want tcp 443 and 80", d.Pattern, d.Proto, d.Ports)
			}
		}
	}
	if !slices.Equal(hosts, []string{"api@api.example.com", "api@uploads.example.com", "gh@api.github.com"}) {
		t.Errorf("inject domain rules: %v", hosts)
	}
}

func TestParseInjectErrorsSayWhereAndWhy(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"a wildcard host", injectHeader + "    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: ['*.example.com']}}}\n",
			[]string{`p.yaml:8:70: spec.credentials[0].deliver.inject.hosts[0]: expected an exact host name like api.github.com (no wildcard: the secret goes to named hosts only), got "*.example.com"`}},
		{"no hosts", injectHeader + "    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: []}}}\n",
			[]string{`p.yaml:8:69: spec.credentials[0].deliver.inject.hosts: expected at least one host`}},
		{"a format without its place", injectHeader + "    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: [a.b], format: Bearer}}}\n",
			[]string{`p.yaml:8:84: spec.credentials[0].deliver.inject.format: expected a header value holding {} once (where the secret goes), like "Bearer {}", got "Bearer"`}},
		{"a bad header and an unknown field", injectHeader + "    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: [a.b], header: 'a b', port: 8443}}}\n",
			[]string{`p.yaml:8:84: spec.credentials[0].deliver.inject.header: expected an HTTP header name like Authorization, got "a b"`,
				`p.yaml:8:91: spec.credentials[0].deliver.inject.port: unknown field, expected one of allowPrivate, basic, format, header, hosts, query`}},
		{"no hosts field", injectHeader + "    - {name: a, source: {env: X}, deliver: {env: T, inject: {header: X}}}\n",
			[]string{`p.yaml:8:61: spec.credentials[0].deliver.inject.hosts: required field missing`}},
		{"without the host's network", header + "spec:\n  credentials:\n    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: [a.b]}}}\n",
			[]string{`p.yaml:7:61: spec.credentials[0].deliver.inject: an injected credential needs spec.isolation.network: host-filtered (its hosts are reached through berm's egress), got none`}},
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

func TestParseInjectBasicAndQueryShapes(t *testing.T) {
	p, err := Parse("p.yaml", []byte(injectHeader+`    - name: gitbasic
      source: {env: A}
      deliver: {env: A, inject: {hosts: [git.example.com], basic: {user: x-access-token}}}
    - name: maps
      source: {env: B}
      deliver: {env: B, inject: {hosts: [maps.example.com], query: key}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Spec.Credentials
	if in := got[0].Deliver.Inject; in.BasicUser != "x-access-token" || in.Header != "Authorization" || in.Format != "Basic {}" || in.Query != "" {
		t.Errorf("basic: %+v", in)
	}
	if in := got[1].Deliver.Inject; in.Query != "key" || in.BasicUser != "" {
		t.Errorf("query: %+v", in)
	}
}

func TestParseInjectShapeErrorsSayWhy(t *testing.T) {
	for _, tc := range []struct{ name, inject, want string }{
		{"basic and a format", "{hosts: [a.b], basic: {user: u}, format: 'Token {}'}", "expected one of header and format, basic, or query (where the secret goes), got basic and format"},
		{"query and a header", "{hosts: [a.b], query: key, header: X-Key}", "got query and header"},
		{"basic and query", "{hosts: [a.b], basic: {user: u}, query: key}", "got basic and query"},
		{"basic without a user", "{hosts: [a.b], basic: {}}", "inject.basic.user: required field missing"},
		{"a user with a colon", "{hosts: [a.b], basic: {user: 'a:b'}}", `inject.basic.user: expected a user name like x-access-token (no colon, space or control character), got "a:b"`},
		{"a basic field unknown", "{hosts: [a.b], basic: {user: u, password: p}}", "password"},
		{"a query name with an equals sign", "{hosts: [a.b], query: 'a=b'}", `inject.query: expected a query parameter name like access_token (letters, digits, _.~-), got "a=b"`},
		{"a query name that is a list", "{hosts: [a.b], query: [a]}", "inject.query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(injectHeader+"    - {name: a, source: {env: X}, deliver: {env: T, inject: "+tc.inject+"}}\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestAPolicyThatInjectsACredentialOpensNoUDP(t *testing.T) {
	const cred = "    - {name: a, source: {env: X}, deliver: {env: T, inject: {hosts: [api.example.com]}}}\n"
	const plain = "    - {name: a, source: {env: X}, deliver: {env: T}}\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"a udp rule beside an injected credential is refused where it is written",
			injectHeader + cred + "  network:\n    egress:\n      - {domain: api.example.com, ports: [443]}\n      - {cidr: 10.0.0.0/8, ports: [5353], protocol: udp}\n",
			[]string{`p.yaml:12:9: spec.network.egress[1]: expected no udp rule in a policy that injects a credential (spec.credentials[0].deliver.inject): berm inspects a call's TCP and DNS only, so a placeholder in a UDP datagram would leave unseen; remove the rule or deliver the credential without inject`}},
		{"a udp rule without an injected credential is kept",
			injectHeader + plain + "  network:\n    egress:\n      - {cidr: 10.0.0.0/8, ports: [5353], protocol: udp}\n", nil},
		{"tcp rules beside an injected credential are kept",
			injectHeader + cred + "  network:\n    egress:\n      - {cidr: 10.0.0.0/8, ports: [5432]}\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Compile(CompileEnv{Workspace: t.TempDir(), Tmp: t.TempDir()})
			var got []string
			var es Errors
			if errors.As(err, &es) {
				for _, e := range es {
					got = append(got, e.Error())
				}
			} else if err != nil {
				t.Fatalf("got %v, want Errors", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
