package sandboxer_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// Basic auth and a query parameter as injection shapes, with curl: the server behind
// basic.test wants the secret as the basic password of user x-access-token, the one behind
// query.test as ?key=; the call holds only placeholders.
func TestInjectedBasicAuthAndQueryParameterReachTheServer(t *testing.T) {
	bermbin.RequireRoot(t)
	sec := func(prefix string) string { b := make([]byte, 16); rand.Read(b); return prefix + hex.EncodeToString(b) }
	basicSecret, querySecret := sec("pw-"), sec("qk-")
	ca := tlstest.NewCA(t, "upstream shapes root")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		switch {
		case r.Host == "basic.test" && u == "x-access-token" && p == basicSecret:
			fmt.Fprint(w, "authorized")
		case r.Host == "query.test" && r.URL.Query().Get("key") == querySecret && r.URL.Query().Get("q") == "a b":
			fmt.Fprint(w, "authorized")
		default:
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	})
	bIP, qIP := testAddr(t, 40), testAddr(t, 41)
	tlstest.Serve(t, bIP+":443", ca.Leaf(t, "basic.test"), h)
	tlstest.Serve(t, qIP+":443", ca.Leaf(t, "query.test"), h)
	up := dnstest.Start(t, dnstest.Zone{"basic.test": {dnstest.A("basic.test", bIP, 60)}, "query.test": {dnstest.A("query.test", qIP, 60)}})
	pol := filepath.Join(t.TempDir(), "shapes.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-shapes-test}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  credentials:
    - name: pw
      source: {env: SHAPES_BASIC}
      deliver: {env: PW, inject: {hosts: [basic.test], allowPrivate: true, basic: {user: x-access-token}}}
    - name: qk
      source: {env: SHAPES_QUERY}
      deliver: {env: QK, inject: {hosts: [query.test], allowPrivate: true, query: key}}
`), 0o644)
	c := "curl -sS --max-time 20"
	script := fmt.Sprintf(`
echo "basic $(%[1]s -u "x-access-token:$PW" https://basic.test/)"
echo "query $(%[1]s "https://query.test/?q=a+b&key=$QK")"
echo "basicuser $(%[1]s -o /dev/null -w '%%{http_code}' -u "root:$PW" https://basic.test/)"
echo "basicbearer $(%[1]s -o /dev/null -w '%%{http_code}' -H "Authorization: Bearer $PW" https://basic.test/)"
echo "querybasic $(%[1]s -o /dev/null -w '%%{http_code}' "https://basic.test/?key=$QK")"
echo "queryother $(%[1]s -o /dev/null -w '%%{http_code}' "https://query.test/?other=$QK")"
`, c)
	state := t.TempDir()
	r := bermbin.Berm(t, []string{"SHAPES_BASIC=" + basicSecret, "SHAPES_QUERY=" + querySecret, "BERM_INJECT_UPSTREAM_CA=" + ca.PEMPath},
		"run", "--state-dir", state, "--no-rules", "--call-id", "inject-shapes-basic-query", "--workspace", bermbin.Workspace(t), "--policy", pol,
		"--dns-upstream", up.Addr, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	want := map[string]string{
		"basic": "authorized", "query": "authorized",
		"basicuser":   "401", // another user: not the policy's shape, nothing injected
		"basicbearer": "403", // the placeholder raw in the header: misplaced
		"querybasic":  "403", // the query credential's parameter to another host
		"queryother":  "403", // another parameter
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %q, want %q (stdout %q, stderr %q)", k, got[k], w, r.Stdout, r.Stderr)
		}
	}
	for _, s := range []string{basicSecret, querySecret} {
		if strings.Contains(r.Stdout+r.Stderr, s) {
			t.Errorf("a secret reached the caller")
		}
		assertAbsent(t, state, s)
	}
}
