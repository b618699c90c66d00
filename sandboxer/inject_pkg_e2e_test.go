package sandboxer_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// tinyWheel is a pure-Python wheel of package tinypkg 1.0 (tinypkg.hello), with its RECORD.
func tinyWheel(t *testing.T) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"tinypkg/__init__.py", "hello = \"installed through berm\"\n"},
		{"tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\nSummary: a test package\n"},
		{"tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: berm-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for _, f := range files {
		w, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString("tinypkg-1.0.dist-info/RECORD,,\n")
	w, _ := z.Create("tinypkg-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// tinyTarball is an npm package tarball of tinypkg 1.0.0 (require("tinypkg").hello).
func tinyTarball(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", `{"name": "tinypkg", "version": "1.0.0", "main": "index.js"}` + "\n"},
		{"package/index.js", "exports.hello = \"installed through berm\";\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	gz.Close()
	return b.Bytes()
}

// pkgServers are a Python simple index at pypi.test that answers only basic auth of
// __token__ with its secret, and an npm registry at npm.test that answers only its secret as
// a bearer token: each counts the requests it authorized and the credentials it refused.
type pkgServers struct {
	mu                   sync.Mutex
	authorized, refused  map[string]int
	seen                 []string // host, method, path and whether it was authorized
	pypiSecret, npmToken string
}

func (s *pkgServers) gate(host string, ok func(r *http.Request) bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		good := ok(r)
		s.mu.Lock()
		s.seen = append(s.seen, fmt.Sprintf("%s %s %s %t", host, r.Method, r.URL.Path, good))
		if good {
			s.authorized[host]++
		} else if r.Header.Get("Authorization") != "" {
			s.refused[host]++
		}
		s.mu.Unlock()
		if !good {
			w.Header().Set("WWW-Authenticate", `Basic realm="`+host+`"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// pip and npm install a package from a local HTTPS index and registry that answer only the
// secret: the tool holds only the placeholders (the index URL's password, .npmrc's
// _authToken=${NPM_TOKEN}), its installs work, and each download is an injected credential
// event in the trail. No internet: the servers are the test's own.
func TestPipAndNpmInstallWithOnlyTheInjectedTokensPlaceholders(t *testing.T) {
	bermbin.RequireRoot(t)
	rnd := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	s := &pkgServers{authorized: map[string]int{}, refused: map[string]int{}, pypiSecret: "pypi-" + rnd(24), npmToken: "npm_" + rnd(18)}

	wheel, tgz := tinyWheel(t), tinyTarball(t)
	wheelName := "tinypkg-1.0-py3-none-any.whl"
	wheelSum := sha256.Sum256(wheel)
	pypi := http.NewServeMux()
	pypi.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/packages/%s#sha256=%s\">%s</a></body></html>\n", wheelName, hex.EncodeToString(wheelSum[:]), wheelName)
	})
	pypi.HandleFunc("/packages/"+wheelName, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(wheel)
	})
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	packument, _ := json.Marshal(map[string]any{
		"name": "tinypkg", "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{"name": "tinypkg", "version": "1.0.0", "main": "index.js",
			"dist": map[string]string{"tarball": "https://npm.test/tinypkg/-/tinypkg-1.0.0.tgz", "shasum": hex.EncodeToString(sha1sum[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:])}}},
	})
	npm := http.NewServeMux()
	npm.HandleFunc("/tinypkg", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(packument)
	})
	npm.HandleFunc("/tinypkg/-/tinypkg-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(tgz)
	})

	ca := tlstest.NewCA(t, "upstream package root")
	pypiIP, npmIP := testAddr(t, 40), testAddr(t, 41)
	tlstest.Serve(t, pypiIP+":443", ca.Leaf(t, "pypi.test"), s.gate("pypi.test", func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == "__token__" && p == s.pypiSecret
	}, pypi.ServeHTTP))
	tlstest.Serve(t, npmIP+":443", ca.Leaf(t, "npm.test"), s.gate("npm.test", func(r *http.Request) bool {
		return r.Header.Get("Authorization") == "Bearer "+s.npmToken
	}, npm.ServeHTTP))
	up := dnstest.Start(t, dnstest.Zone{
		"pypi.test": {dnstest.A("pypi.test", pypiIP, 60)},
		"npm.test":  {dnstest.A("npm.test", npmIP, 60)},
	})
	pol := filepath.Join(t.TempDir(), "pkg.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-pkg-test}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  credentials:
    - name: pypi
      source: {env: INJECT_PYPI_SECRET}
      deliver: {env: PIP_TOKEN, inject: {hosts: [pypi.test], allowPrivate: true, basic: {user: __token__}}}
    - name: npm
      source: {env: INJECT_NPM_SECRET}
      deliver: {env: NPM_TOKEN, inject: {hosts: [npm.test], allowPrivate: true}}
`), 0o644)

	// The placeholder goes where each tool's users put the token: the index URL's password,
	// and .npmrc's _authToken (npm expands ${NPM_TOKEN}); each tool trusts the call's CA
	// through the variables berm sets (PIP_CERT, NODE_EXTRA_CA_CERTS).
	script := `set -e
export HOME=$PWD PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
python3 -m pip install -q --no-deps --target "$PWD/site" --index-url "https://__token__:$PIP_TOKEN@pypi.test/simple/" tinypkg 2>&1 | tail -5
echo "pip $(PYTHONPATH=$PWD/site python3 -c 'import tinypkg; print(tinypkg.hello)')"
mkdir proj && cd proj
echo '{"name": "proj", "version": "1.0.0"}' > package.json
cat > .npmrc <<'EOF'
registry=https://npm.test/
//npm.test/:_authToken=${NPM_TOKEN}
EOF
npm install --no-audit --no-fund --no-update-notifier --cache "$HOME/.npm-cache" tinypkg 2>&1 | tail -5
echo "npm $(node -e 'console.log(require("tinypkg").hello)')"
`
	ws := bermbin.Workspace(t)
	state := t.TempDir()
	r := bermbin.Berm(t, []string{"INJECT_PYPI_SECRET=" + s.pypiSecret, "INJECT_NPM_SECRET=" + s.npmToken, "BERM_INJECT_UPSTREAM_CA=" + ca.PEMPath},
		"run", "--state-dir", state, "--no-rules", "--call-id", "inject-pkg", "--workspace", ws, "--policy", pol,
		"--dns-upstream", up.Addr, "--", "sh", "-c", script)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s (server saw %q)", r.Exit, r.Stdout, r.Stderr, s.seen)
	}
	for _, w := range []string{"pip installed through berm", "npm installed through berm"} {
		if !strings.Contains(r.Stdout, w) {
			t.Errorf("no %q in the output: %q %q (server saw %q)", w, r.Stdout, r.Stderr, s.seen)
		}
	}
	for _, host := range []string{"pypi.test", "npm.test"} {
		if s.authorized[host] == 0 || s.refused[host] != 0 {
			t.Errorf("%s authorized %d requests and refused %d with credentials (%q)", host, s.authorized[host], s.refused[host], s.seen)
		}
	}
	for _, secret := range []string{s.pypiSecret, s.npmToken} {
		if strings.Contains(r.Stdout+r.Stderr, secret) {
			t.Errorf("a secret reached the caller")
		}
		assertAbsent(t, state, secret)
		assertAbsent(t, ws, secret)
	}
	tl := bermbin.Timeline(t, state, "inject-pkg")
	var injected []string
	for _, ev := range tl.Events {
		if c := ev.Credential; ev.Kind == event.KindCredential && c != nil && c.Action == event.CredentialInjected {
			injected = append(injected, fmt.Sprintf("%s %s %s %s %d", c.Name, c.Host, c.Method, c.Path, c.Status))
		}
	}
	for _, w := range []string{
		"pypi pypi.test GET /simple/tinypkg/ 200", "pypi pypi.test GET /packages/" + wheelName + " 200",
		"npm npm.test GET /tinypkg 200", "npm npm.test GET /tinypkg/-/tinypkg-1.0.0.tgz 200",
	} {
		if !slices.Contains(injected, w) {
			t.Errorf("no injected credential event %q in %q", w, injected)
		}
	}
}
