package sandboxer_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// A hot reload of a running call's policy and its injected credential: a reload that adds an
// unrelated egress rule (every rule after it renumbered) applies and leaves the injection as
// it was, api.test injected and evil.test still reached straight; a reload that changes the
// injected credential (its format) is refused, the running call keeping the injection it
// started with; a new call after it gets the reloaded injection.
func TestAHotReloadKeepsARunningCallsInjectionAndANewCallGetsTheReloadedOne(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startInjectEnv(t)
	otherIP := testAddr(t, 21)
	// signed by the upstream roots the call's egress trusts: an injected call's other
	// connections go through the inspecting relay, which verifies the real server
	tlstest.Serve(t, otherIP+":443", e.ca.Leaf(t, "other.test"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other") }))
	up := dnstest.Start(t, dnstest.Zone{
		"api.test":   {dnstest.A("api.test", e.apiIP, 60)},
		"evil.test":  {dnstest.A("evil.test", e.evilIP, 60)},
		"other.test": {dnstest.A("other.test", otherIP, 60)},
	})
	pol := e.policy(t)
	v1 := mustRead(t, pol)
	evilRule := "      - {domain: evil.test, ports: [443], allowPrivate: true}\n"
	// v2: a rule before evil.test's: evil.test's and api.test's rules get new numbers
	v2 := strings.Replace(v1, evilRule, "      - {domain: other.test, ports: [443], allowPrivate: true}\n"+evilRule, 1)
	// v3: the injected credential's format changes
	v3 := strings.Replace(v2, "inject: {hosts: [api.test], allowPrivate: true}", `inject: {hosts: [api.test], allowPrivate: true, format: "token {}"}`, 1)
	if v2 == v1 || v3 == v2 {
		t.Fatal("the policy to reload is not the one startInjectEnv writes")
	}

	// each line: other.test, api.test with the bearer placeholder, evil.test, and the http code
	// of api.test with the placeholder in the reloaded format
	script := `while [ ! -e stop ]; do
echo "$(curl -s -k --max-time 5 https://other.test/ || echo fail) $(curl -sS --max-time 5 -H "Authorization: Bearer $API_TOKEN" https://api.test/check 2>/dev/null || echo fail) $(curl -s -k --max-time 5 https://evil.test/ || echo fail) $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: token $API_TOKEN" https://api.test/echo)"
sleep 0.1
done`
	state, ws := t.TempDir(), bermbin.Workspace(t)
	env := append(os.Environ(), "INJECT_TEST_SECRET="+e.secret, "BERM_INJECT_UPSTREAM_CA="+e.caPEM)
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--call-id", "inject-reload",
		"--workspace", ws, "--policy", pol, "--dns-upstream", up.Addr, "--timeout", "90s", "--", "sh", "-c", script)
	cmd.Env = env
	call := startLineCall(t, cmd)
	call.waitFor(t, "fail authorized evil 403", 3)

	os.WriteFile(pol, []byte(v2), 0o644)
	// other.test reached: the reload applied; api.test still injected, evil.test still straight
	call.waitFor(t, "other authorized evil 403", 3)

	os.WriteFile(pol, []byte(v3), 0o644)
	refused := func() *event.Reload {
		for _, ev := range bermbin.Timeline(t, state, "inject-reload").Events {
			if ev.Kind == event.KindReload && ev.Reload != nil && !ev.Reload.Applied {
				return ev.Reload
			}
		}
		return nil
	}
	var r *event.Reload
	for range 600 { // the watcher looks every 100ms; the call's own timeout bounds this
		if r = refused(); r != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r == nil || !strings.Contains(r.Detail, "injected credential api changed") {
		t.Fatalf("the reload changing the injected credential: %+v, want refused naming it", r)
	}
	// the running call keeps its own injection: the bearer placeholder, the token one refused
	call.waitFor(t, "other authorized evil 403", 3)
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	call.cmd.Wait()

	tl := bermbin.Timeline(t, state, "inject-reload")
	var applied, refusals int
	for _, ev := range tl.Events {
		if ev.Kind == event.KindReload && ev.Reload != nil {
			if ev.Reload.Applied {
				applied++
			} else {
				refusals++
			}
		}
	}
	if applied != 1 || refusals != 1 {
		t.Errorf("reloads applied %d, refused %d; want 1 and 1", applied, refusals)
	}

	// a new call gets the reloaded injection: the token format, echoed back redacted
	r2 := bermbin.Berm(t, []string{"INJECT_TEST_SECRET=" + e.secret, "BERM_INJECT_UPSTREAM_CA=" + e.caPEM},
		"run", "--state-dir", state, "--no-rules", "--call-id", "inject-reloaded", "--workspace", bermbin.Workspace(t), "--policy", pol,
		"--dns-upstream", up.Addr, "--", "sh", "-c", `curl -sS --max-time 20 -H "Authorization: token $API_TOKEN" https://api.test/echo`)
	if r2.Exit != 0 || r2.Stdout != "you sent token [berm:redacted:api]" {
		t.Errorf("a new call after the reload: exit %d, %q %q; want the secret injected in the reloaded format", r2.Exit, r2.Stdout, r2.Stderr)
	}
	assertAbsent(t, state, e.secret)
}
