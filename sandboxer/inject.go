package sandboxer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// callBundle is where an injected credential's call finds the trust store it sees: the host's
// bundle and the call's own CA, on a tmpfs of the call's over the system's certificate
// directory, and named by every variable a TLS library reads (caCertVars).
const (
	callBundle = "/etc/ssl/certs/ca-certificates.crt"
	hostBundle = "/etc/ssl/certs/ca-certificates.crt"
)

var caCertVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"}

// injected says the credential reaches the tool as a placeholder (deliver.inject).
func (c *issued) injected() bool { return c.cred.Deliver.Inject != nil }

// startInjection hands the call's injected credentials to the agent's injecting egress and
// puts the call's CA into its trust store (env is the call's environment so far).
func (l *launch) startInjection(env []string) ([]string, error) {
	var creds []inject.Credential
	for _, is := range l.creds {
		if !is.injected() {
			continue
		}
		in := is.cred.Deliver.Inject
		creds = append(creds, inject.Credential{Name: is.cred.Name, Value: is.value, Placeholder: is.placeholder, Fingerprint: is.fp,
			Hosts: in.Hosts, Header: in.Header, Format: in.Format, BasicUser: in.BasicUser, Query: in.Query})
	}
	if len(creds) == 0 {
		return env, nil
	}
	caPEM, err := l.call.Inject(creds, l.spec.Limits.WallTime)
	if err != nil {
		return nil, fmt.Errorf("injected credentials: %w", err)
	}
	host, err := os.ReadFile(hostBundle)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("injected credentials: the host's trust store: %w", err)
	}
	bundle := append(append(bytes.TrimRight(host, "\n"), '\n'), caPEM...)
	l.env.init.Secrets = append(l.env.init.Secrets, sandboxinit.SecretFile{Path: callBundle, Data: bundle})
	if l.env.init.Landlock != nil {
		rs := *l.env.init.Landlock
		rs.Paths = append(append([]landlock.PathRule(nil), rs.Paths...), landlock.PathRule{Path: callBundle, Access: landlock.ReadFile},
			landlock.PathRule{Path: filepath.Dir(callBundle), Access: landlock.ReadDir})
		l.env.init.Landlock = &rs
	}
	for _, v := range caCertVars {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, v+"=") })
		env = append(env, v+"="+callBundle)
	}
	return env, nil
}
