package sandboxer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// injectBenchScript times n HTTPS requests to HOST/check on one keep-alive connection and
// n requests each on a new connection (TCP and TLS handshake included), from inside the call.
// It prints "keepalive NS" and "newconn NS" per request, and fails on any answer but 200.
// Only api.test gets the placeholder (in Authorization).
const injectBenchScript = `import http.client, os, ssl, sys, time
n = int(sys.argv[1]); host = sys.argv[2]; cafile = sys.argv[3] if len(sys.argv) > 3 else None
ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context()
h = {"Authorization": "Bearer " + os.environ["API_TOKEN"]} if host == "api.test" else {}
def get(c):
    c.request("GET", "/check", headers=h)
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit("status %d" % r.status)
c = http.client.HTTPSConnection(host, context=ctx); get(c)
s = time.perf_counter_ns()
for _ in range(n): get(c)
print("keepalive", (time.perf_counter_ns() - s) // n)
c.close()
s = time.perf_counter_ns()
for _ in range(n):
    c = http.client.HTTPSConnection(host, context=ctx); get(c); c.close()
print("newconn", (time.perf_counter_ns() - s) // n)
`

// BenchmarkInjectedRequest: what the injecting egress adds to an HTTPS request, on a
// keep-alive connection and on a new connection (its handshakes included), against the same
// request from the same kind of call to the same local server with the secret in an
// environment variable (deliver: {env}, a plain egress rule, no injection). Both calls run
// in each round, interleaved.
func BenchmarkInjectedRequest(b *testing.B) { benchInjected(b, "api.test") }

// BenchmarkInspectedRequest: what the inspecting relay adds to an HTTPS request to a host
// that is no credential's (evil.test, no placeholder sent) in a call with an injected
// credential (TLS ended under the call's CA, made again upstream, what the tool sends
// scanned), against the same request from a call without injection.
func BenchmarkInspectedRequest(b *testing.B) { benchInjected(b, "evil.test") }

func benchInjected(b *testing.B, host string) {
	bermbin.RequireRoot(b)
	const n = 200
	e := startInjectEnv(b)
	plain := filepath.Join(b.TempDir(), "plain.yaml")
	if err := os.WriteFile(plain, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-bench-plain}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  network:
    egress:
      - {domain: api.test, ports: [443], allowPrivate: true}
      - {domain: evil.test, ports: [443], allowPrivate: true}
  credentials:
    - name: api
      source: {env: INJECT_TEST_SECRET}
      deliver: {env: API_TOKEN}
`), 0o644); err != nil {
		b.Fatal(err)
	}
	pols := map[string]string{"env": plain, "inject": e.policy(b)}
	per := map[string]float64{}
	for i := 0; i < b.N; i++ {
		for _, mode := range []string{"env", "inject"} {
			ws := bermbin.Workspace(b)
			if err := os.WriteFile(filepath.Join(ws, "bench.py"), []byte(injectBenchScript), 0o644); err != nil {
				b.Fatal(err)
			}
			args := []string{"python3", filepath.Join(ws, "bench.py"), strconv.Itoa(n), host}
			if mode == "env" { // the call trusts the upstream root itself
				ca, err := os.ReadFile(e.caPEM)
				if err != nil {
					b.Fatal(err)
				}
				os.WriteFile(filepath.Join(ws, "ca.pem"), ca, 0o644)
				args = append(args, filepath.Join(ws, "ca.pem"))
			}
			callID := fmt.Sprintf("bench-inject-%s-%d-%s", mode, i, strconv.FormatInt(int64(os.Getpid()), 36))
			r := bermbin.Berm(b, []string{"INJECT_TEST_SECRET=" + e.secret, "BERM_INJECT_UPSTREAM_CA=" + e.caPEM},
				append([]string{"run", "--state-dir", b.TempDir(), "--no-rules", "--call-id", callID, "--workspace", ws,
					"--policy", pols[mode], "--dns-upstream", e.up.Addr, "--"}, args...)...)
			got := map[string]float64{}
			for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if k, v, ok := strings.Cut(l, " "); ok {
					got[k], _ = strconv.ParseFloat(v, 64)
				}
			}
			if r.Exit != 0 || got["keepalive"] == 0 || got["newconn"] == 0 {
				b.Fatalf("%s: exit %d: %s %s", mode, r.Exit, r.Stdout, r.Stderr)
			}
			per[mode+"-keepalive"] += got["keepalive"]
			per[mode+"-newconn"] += got["newconn"]
		}
	}
	N := float64(b.N)
	b.ReportMetric(per["env-keepalive"]/N, "ns/req-env")
	b.ReportMetric(per["inject-keepalive"]/N, "ns/req-inject")
	b.ReportMetric(per["inject-keepalive"]/per["env-keepalive"], "req-inject/env")
	b.ReportMetric(per["env-newconn"]/N, "ns/conn-env")
	b.ReportMetric(per["inject-newconn"]/N, "ns/conn-inject")
	b.ReportMetric(per["inject-newconn"]/per["env-newconn"], "conn-inject/env")
}
