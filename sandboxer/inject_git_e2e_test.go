package sandboxer_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// gitOn runs git in dir on the host, for the server's side of the test.
func gitOn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@berm.test", "-c", "init.defaultBranch=main"}, args...)...)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("git %q: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A real git clone and push over HTTPS through git http-backend, which answers only requests
// carrying the secret in Authorization: the tool has only the placeholder (git -c
// http.extraHeader, as CI systems pass tokens), and its clone and push work.
func TestGitCloneAndPushWorkWithOnlyTheInjectedTokensPlaceholder(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, tc := range []struct{ name, inject, git, url, callID string }{
		{"a bearer token in http.extraHeader", "", `-c http.extraHeader="Authorization: Bearer $GIT_TOKEN"`, "https://git.test/repo.git", "inject-git-bearer"},
		// git sends the URL's credentials as basic auth after the server's challenge
		{"the token as basic auth's password in the URL", ", basic: {user: x-access-token}", "", "https://x-access-token:$GIT_TOKEN@git.test/repo.git", "inject-git-basic"},
	} {
		t.Run(tc.name, func(t *testing.T) { testGitThroughInjection(t, tc.inject, tc.git, tc.url, tc.callID) })
	}
}

func testGitThroughInjection(t *testing.T, injectShape, gitArgs, repoURL, callID string) {
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	backendPath := filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend")
	if _, err := os.Stat(backendPath); err != nil {
		t.Fatalf("git http-backend: %v", err)
	}
	b := make([]byte, 20)
	rand.Read(b)
	secret := "ghp_" + hex.EncodeToString(b)

	root := t.TempDir()
	seed := filepath.Join(root, "seed")
	os.Mkdir(seed, 0o755)
	gitOn(t, seed, "init", "-q")
	os.WriteFile(filepath.Join(seed, "README"), []byte("hello from the server\n"), 0o644)
	gitOn(t, seed, "add", "README")
	gitOn(t, seed, "commit", "-q", "-m", "seed")
	gitOn(t, root, "clone", "-q", "--bare", "seed", "repo.git")
	bare := filepath.Join(root, "repo.git")
	gitOn(t, bare, "config", "http.receivepack", "true")

	var mu sync.Mutex
	var authorized, refused int
	var seen []string
	cgiH := &cgi.Handler{Path: backendPath, Root: "/", Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		mu.Lock()
		seen = append(seen, a)
		ok := a == "Bearer "+secret
		if u, p, basic := r.BasicAuth(); basic {
			ok = u == "x-access-token" && p == secret
		}
		if ok {
			authorized++
		} else if a != "" {
			refused++
		}
		mu.Unlock()
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		cgiH.ServeHTTP(w, r)
	})
	ip := testAddr(t, 30)
	ca := tlstest.NewCA(t, "upstream git root")
	tlstest.Serve(t, ip+":443", ca.Leaf(t, "git.test"), h)
	up := dnstest.Start(t, dnstest.Zone{"git.test": {dnstest.A("git.test", ip, 60)}})
	pol := filepath.Join(t.TempDir(), "git.yaml")
	os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-git-test}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  credentials:
    - name: git
      source: {env: INJECT_GIT_SECRET}
      deliver: {env: GIT_TOKEN, inject: {hosts: [git.test], allowPrivate: true`+injectShape+`}}
`), 0o644)

	script := `set -e
export HOME=$PWD GIT_TERMINAL_PROMPT=0
g() { git ` + gitArgs + ` -c user.name=tool -c user.email=tool@berm.test "$@"; }
g clone -q "` + repoURL + `" clone
cd clone
echo "readme $(cat README)"
echo "from the tool" > TOOL
g add TOOL
g commit -q -m "pushed by the tool"
g push -q origin HEAD:main
echo "pushed ok"
`
	ws := bermbin.Workspace(t)
	state := t.TempDir()
	r := bermbin.Berm(t, []string{"INJECT_GIT_SECRET=" + secret, "BERM_INJECT_UPSTREAM_CA=" + ca.PEMPath},
		"run", "--state-dir", state, "--no-rules", "--call-id", callID, "--workspace", ws, "--policy", pol,
		"--dns-upstream", up.Addr, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stdout, "readme hello from the server") || !strings.Contains(r.Stdout, "pushed ok") {
		t.Errorf("clone and push: %q %q", r.Stdout, r.Stderr)
	}
	if got := gitOn(t, bare, "log", "-1", "--format=%s", "main"); got != "pushed by the tool" {
		t.Errorf("the server's main is at %q, want the tool's commit", got)
	}
	mu.Lock()
	if authorized == 0 || refused != 0 {
		t.Errorf("the server authorized %d requests and refused %d with credentials (Authorization values %q)", authorized, refused, seen)
	}
	mu.Unlock()
	if strings.Contains(r.Stdout+r.Stderr, secret) {
		t.Errorf("the secret reached the caller")
	}
	assertAbsent(t, state, secret)
	assertAbsent(t, ws, secret)
}
