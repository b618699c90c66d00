package policy

import (
	"fmt"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Credential is a secret a call receives from a broker at its start: read from a file or
// berm's environment, or minted per call by a command berm runs outside the sandbox. Only its
// name and a keyed fingerprint are ever recorded.
type Credential struct {
	Name   string
	Source CredentialSource
	// Deliver is how the tool gets it: an environment variable, or a file on a tmpfs of the
	// call's own (0400, owned by the call's uid).
	Deliver CredentialDelivery
	// Revoke runs outside the sandbox at the call's end, whatever ended it, with
	// BERM_SECRET_FINGERPRINT set; nil: nothing to revoke.
	Revoke []string
	// TTL is how long the credential lives (BERM_TTL for the minting and revoking commands);
	// past it the file is removed and revoke runs. Zero: the call's wall time.
	TTL time.Duration
	// RunAs is the node user its exec source and revoke run as, with only PATH and the BERM_
	// variables in their environment (not berm's, which may hold env sources' secrets); empty:
	// root, with berm's environment.
	RunAs string
}

// CredentialSource is exactly one of File, Env, Exec.
type CredentialSource struct {
	File string   // read as root at the call's start
	Env  string   // from berm's own environment (bermd's, or the embedded launcher's)
	Exec []string // its stdout is the secret; BERM_CALL_ID, BERM_TENANT, BERM_TOOL, BERM_TTL set
}

// CredentialDelivery is exactly one of Env, File. With Inject, what the tool gets there is a
// per-call placeholder of the secret's shape; the secret stays in berm, which puts it into the
// tool's requests to the credential's hosts on their way out (agent/inject).
type CredentialDelivery struct {
	Env    string
	File   string
	Inject *Inject
}

// Inject says where berm's egress puts the secret in place of the placeholder: in Header
// (Format with {} standing for the value) of HTTP requests to Hosts only, on ports 443 (TLS,
// under a per-call CA) and 80.
type Inject struct {
	Hosts  []string // exact host names, lowercase
	Header string   // canonical header name; default Authorization
	Format string   // holds {} once; default "Bearer {}"
	// AllowPrivate: the hosts may resolve to internal addresses (as a domain rule's).
	AllowPrivate bool
	// BasicUser (basic: {user: NAME}): the secret is the password of HTTP basic auth, the tool
	// sending Authorization: Basic base64(NAME:placeholder); Header is Authorization, Format
	// "Basic {}". Exclusive with header, format and query.
	BasicUser string
	// Query (query: NAME): the secret is the value of the URL's query parameter NAME, the tool
	// sending ?NAME=placeholder. Exclusive with header, format and basic.
	Query string
}

// InjectPorts are the ports of a credential's hosts whose connections go through berm's
// injecting egress: 443 (TLS) and 80.
var InjectPorts = []uint16{443, 80}

var (
	headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
	basicUserRE  = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~@-]+$")
	queryNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.~-]+$`)
)

func (d *decoder) inject(n *yaml.Node, field string, dst **Inject) {
	in := &Inject{Header: "Authorization", Format: "Bearer {}"}
	before := len(d.errs)
	var shapes []string
	d.mapping(n, field, fields{
		"hosts": func(n *yaml.Node, f string) {
			list(d, n, f, &in.Hosts, func(n *yaml.Node, f string) (string, bool) {
				var h string
				d.domain(n, f, &h)
				if strings.HasPrefix(h, "*") {
					d.fail(n, f, "expected an exact host name like api.github.com (no wildcard: the secret goes to named hosts only), got %s", describe(n))
					return "", false
				}
				return h, h != ""
			})
			if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
				d.fail(n, f, "expected at least one host")
			}
		},
		"header": func(n *yaml.Node, f string) {
			if s, ok := d.matching(n, f, headerNameRE, "an HTTP header name like Authorization", ""); ok {
				in.Header = http.CanonicalHeaderKey(s)
			}
		},
		"format": func(n *yaml.Node, f string) {
			s, ok := d.scalar(n, f, `a header value holding {} once, like "Bearer {}"`, "!!str")
			if !ok {
				return
			}
			if strings.Count(s, "{}") != 1 || strings.ContainsAny(s, "\r\n\x00") {
				d.fail(n, f, `expected a header value holding {} once (where the secret goes), like "Bearer {}", got %s`, describe(n))
				return
			}
			in.Format = s
		},
		"allowPrivate": func(n *yaml.Node, f string) { d.boolean(n, f, &in.AllowPrivate) },
		"basic": func(n *yaml.Node, f string) {
			shapes = append(shapes, "basic")
			d.mapping(n, f, fields{
				"user": func(n *yaml.Node, f string) {
					if s, ok := d.matching(n, f, basicUserRE, "a user name like x-access-token", " (no colon, space or control character)"); ok {
						in.BasicUser = s
					}
				},
			}, "user")
		},
		"query": func(n *yaml.Node, f string) {
			shapes = append(shapes, "query")
			if s, ok := d.matching(n, f, queryNameRE, "a query parameter name like access_token", " (letters, digits, _.~-)"); ok {
				in.Query = s
			}
		},
	}, "hosts")
	for _, k := range []string{"header", "format"} {
		if hasKey(n, k) {
			shapes = append(shapes, k)
		}
	}
	if slices.Contains(shapes, "basic") || slices.Contains(shapes, "query") {
		if len(shapes) > 1 {
			d.fail(n, field, "expected one of header and format, basic, or query (where the secret goes), got %s", strings.Join(shapes, " and "))
		}
	}
	if in.BasicUser != "" {
		in.Header, in.Format = "Authorization", "Basic {}"
	}
	if len(d.errs) == before {
		*dst = in
	}
}

// Output is what berm does to the tool's stdout and stderr on their way to the caller.
type Output struct {
	// Redact are patterns replaced by [berm:redacted:NAME] in what the caller receives, each
	// match raising a credential alert. Delivered credentials are always redacted, in their
	// common encodings, without being listed.
	Redact []RedactPattern
}

// RedactPattern is a named regular expression (RE2). With End, a match opens a block that
// lasts until End matches, across writes: everything in it is redacted (a private-key block
// written line by line).
type RedactPattern struct {
	Name  string
	Regex string
	End   string
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (d *decoder) credential(n *yaml.Node, field string) (Credential, bool) {
	var c Credential
	before := len(d.errs)
	d.mapping(n, field, fields{
		"name": func(n *yaml.Node, f string) { d.name(n, f, &c.Name) },
		"source": func(n *yaml.Node, f string) {
			given := 0
			d.mapping(n, f, fields{
				"file": func(n *yaml.Node, f string) {
					given++
					if p, ok := d.absPath(n, f); ok {
						c.Source.File = p
					}
				},
				"env":  func(n *yaml.Node, f string) { given++; d.envName(n, f, &c.Source.Env) },
				"exec": func(n *yaml.Node, f string) { given++; d.argv(n, f, &c.Source.Exec) },
			})
			if given != 1 && n.Kind == yaml.MappingNode {
				d.fail(n, f, "expected exactly one of file, env or exec, got %d", given)
			}
		},
		"deliver": func(n *yaml.Node, f string) {
			given := 0
			d.mapping(n, f, fields{
				"env": func(n *yaml.Node, f string) { given++; d.envName(n, f, &c.Deliver.Env) },
				"file": func(n *yaml.Node, f string) {
					given++
					if p, ok := d.absPath(n, f); ok {
						c.Deliver.File = p
					}
				},
				"inject": func(n *yaml.Node, f string) { d.inject(n, f, &c.Deliver.Inject) },
			})
			if given != 1 && n.Kind == yaml.MappingNode {
				d.fail(n, f, "expected exactly one of env or file, got %d", given)
			}
		},
		"revoke": func(n *yaml.Node, f string) {
			d.mapping(n, f, fields{
				"exec": func(n *yaml.Node, f string) { d.argv(n, f, &c.Revoke) },
			}, "exec")
		},
		"ttl":   func(n *yaml.Node, f string) { d.duration(n, f, &c.TTL) },
		"runAs": func(n *yaml.Node, f string) { d.userName(n, f, &c.RunAs) },
	}, "name", "source", "deliver")
	return c, len(d.errs) == before
}

var userNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// userName is a node user's name (resolved by the launcher when the call starts).
func (d *decoder) userName(n *yaml.Node, field string, dst *string) {
	s, ok := d.scalar(n, field, "a user name like nobody", "!!str")
	if !ok {
		return
	}
	if !userNameRE.MatchString(s) || s == "root" {
		d.fail(n, field, "expected the name of a user other than root, like nobody, got %s", describe(n))
		return
	}
	*dst = s
}

func (d *decoder) envName(n *yaml.Node, field string, dst *string) {
	if s, ok := d.matching(n, field, envNameRE, "an environment variable name like GITHUB_TOKEN", ""); ok {
		*dst = s
	}
}

// matching is a string scalar re matches: expected names it in the error, hint (if any)
// follows it when the string is there but re refuses it.
func (d *decoder) matching(n *yaml.Node, field string, re *regexp.Regexp, expected, hint string) (string, bool) {
	s, ok := d.scalar(n, field, expected, "!!str")
	if !ok {
		return "", false
	}
	if !re.MatchString(s) {
		d.fail(n, field, "expected %s%s, got %s", expected, hint, describe(n))
		return "", false
	}
	return s, true
}

// absPath is an absolute, clean host path (no placeholders: credentials live outside the
// workspace and /tmp).
func (d *decoder) absPath(n *yaml.Node, field string) (string, bool) {
	s, ok := d.scalar(n, field, "an absolute path", "!!str")
	if !ok {
		return "", false
	}
	if !strings.HasPrefix(s, "/") || path.Clean(s) != s || s == "/" {
		d.fail(n, field, "expected a clean absolute path of a file (no placeholders, '.', '..', '//' or trailing '/'), got %s", describe(n))
		return "", false
	}
	return s, true
}

// argv is a command: an absolute program path and its arguments.
func (d *decoder) argv(n *yaml.Node, field string, dst *[]string) {
	var out []string
	list(d, n, field, &out, func(n *yaml.Node, f string) (string, bool) {
		return d.scalar(n, f, "a string", "!!str", "!!int")
	})
	if n.Kind != yaml.SequenceNode {
		return
	}
	if len(out) == 0 || !strings.HasPrefix(out[0], "/") {
		d.fail(n, field, "expected a command starting with an absolute program path, like [/usr/local/bin/mint-token, --ttl, 5m]")
		return
	}
	*dst = out
}

func (d *decoder) output(n *yaml.Node, field string, o *Output) {
	d.mapping(n, field, fields{
		"redact": func(n *yaml.Node, f string) { list(d, n, f, &o.Redact, d.redactPattern) },
	}, d.required("redact")...)
}

func (d *decoder) redactPattern(n *yaml.Node, field string) (RedactPattern, bool) {
	var r RedactPattern
	before := len(d.errs)
	re := func(dst *string) func(n *yaml.Node, f string) {
		return func(n *yaml.Node, f string) {
			s, ok := d.scalar(n, f, "a regular expression (RE2)", "!!str")
			if !ok {
				return
			}
			if _, err := regexp.Compile(s); err != nil {
				d.fail(n, f, "expected a regular expression (RE2), got %s: %v", describe(n), err)
				return
			}
			if regexp.MustCompile(s).MatchString("") {
				d.fail(n, f, "expected a pattern that does not match the empty string, got %s", describe(n))
				return
			}
			*dst = s
		}
	}
	d.mapping(n, field, fields{
		"name":  func(n *yaml.Node, f string) { d.name(n, f, &r.Name) },
		"regex": re(&r.Regex),
		"end":   re(&r.End),
	}, "name", "regex")
	return r, len(d.errs) == before
}

// checkCredentials finds what no single credential shows: names and deliveries given twice,
// and a delivery file where the call's root already shows something of the host's (it is
// mounted on a tmpfs of its own, over its directory).
func (d *decoder) checkCredentials(p *Policy) {
	at := func(field string) *yaml.Node { return d.at(field, &yaml.Node{Line: 1, Column: 1}) }
	names, envs, files := map[string]bool{}, map[string]bool{}, map[string]bool{}
	fs := p.Spec.Filesystem
	granted := slices.Concat(fs.Read, fs.Write, fs.Exec)
	for i, c := range p.Spec.Credentials {
		f := fmt.Sprintf("spec.credentials[%d]", i)
		if names[c.Name] {
			d.fail(at(f+".name"), f+".name", "credential %s listed twice", c.Name)
		}
		names[c.Name] = true
		if c.Deliver.Inject != nil && p.Spec.Isolation.Network != NetworkHostFiltered {
			d.fail(at(f+".deliver.inject"), f+".deliver.inject",
				"an injected credential needs spec.isolation.network: %s (its hosts are reached through berm's egress), got %s", NetworkHostFiltered, p.Spec.Isolation.Network)
		}
		if e := c.Deliver.Env; e != "" {
			if envs[e] {
				d.fail(at(f+".deliver.env"), f+".deliver.env", "%s delivered twice", e)
			}
			envs[e] = true
		}
		file := c.Deliver.File
		if file == "" {
			continue
		}
		if files[file] {
			d.fail(at(f+".deliver.file"), f+".deliver.file", "%s delivered twice", file)
		}
		files[file] = true
		dir := path.Dir(file)
		for _, g := range granted {
			if strings.HasPrefix(g, "${") {
				continue // the launcher checks the workspace's and /tmp's real paths
			}
			if g == "/" || dir == g || strings.HasPrefix(dir, g+"/") || strings.HasPrefix(g, dir+"/") {
				d.fail(at(f+".deliver.file"), f+".deliver.file",
					"expected a file in a directory the policy grants nothing in or under (it gets a tmpfs of its own), got %s: %s is granted", file, g)
				break
			}
		}
		if dir == "/" {
			d.fail(at(f+".deliver.file"), f+".deliver.file", "expected a file in a directory of its own like /run/secrets, got %s", file)
		}
	}
}

// hasKey says the mapping n has the key k.
func hasKey(n *yaml.Node, k string) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return true
		}
	}
	return false
}
