package sandboxer_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/promscrape"
)

// A tool floods its injecting egress with connections it never speaks on (each one stuck
// before its TLS handshake, as slowloris does): it holds inject.MaxConns of them, every one
// past that is closed at once and counted, and meanwhile another tenant's call through the same
// bermd still gets its secret injected; once the flood ends, the flooding call's own requests
// go through again.
func TestAFloodOfConnectionsIsCappedPerCallAndSparesTheOthers(t *testing.T) {
	bermbin.RequireRoot(t)
	e := startInjectEnv(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(e.secret), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "flood.yaml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: inject-flood-test}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  credentials:
    - name: api
      source: {file: %s}
      deliver: {env: API_TOKEN, inject: {hosts: [api.test], allowPrivate: true}}
`, secretFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := bermbin.StartDaemon(t, "--no-rules", "--dns-upstream", e.up.Addr, "--inject-upstream-ca", e.caPEM)
	excess := 72
	n := inject.MaxConns + excess
	curl := `curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" https://api.test/check`
	flood := fmt.Sprintf(`timeout 300 python3 - <<'EOF'
import select, socket, time, os
socks, reset = [], 0
for _ in range(%d):
    try:
        socks.append(socket.create_connection(("api.test", 443), timeout=20))
    except ConnectionResetError:  # closed by the egress before connect returned
        reset += 1
closed, deadline = set(), time.time() + 120
while reset + len(closed) < %d and time.time() < deadline:
    r, _, _ = select.select([s for s in socks if s not in closed], [], [], 1)
    for s in r:
        try:
            b = s.recv(1)
        except OSError:
            b = b""
        if not b:
            closed.add(s)
print("closed", reset + len(closed), flush=True)
open("flooded", "w").close()
while not os.path.exists("go"):
    time.sleep(0.05)
for s in socks:
    s.close()
EOF
for i in 1 2 3 4 5; do out=$(%s 2>&1) && break; sleep 0.2; done
echo "after $out"
`, n, excess, curl)
	wsA, wsB := bermbin.Workspace(t), bermbin.Workspace(t)
	run := func(id, tenant, ws, script string) *exec.Cmd {
		return exec.Command(bermbin.Path(t, "berm"), "run", "--socket", d.Socket, "--daemon", "required", "--call-id", id,
			"--tenant", tenant, "--workspace", ws, "--policy", pol, "--", "sh", "-c", script)
	}
	a := bermbin.Start(t, run("inject-flood", "flooder", wsA, flood))
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(wsA, "flooded")); err == nil {
			break
		}
		select {
		case r := <-a:
			t.Fatalf("the flooding call ended before its flood did: exit %d, %q %q", r.Exit, r.Stdout, r.Stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the flooding call did not get through its flood")
		}
	}
	b := bermbin.Run(t, run("inject-neighbour", "neighbour", wsB, "echo \"neighbour $("+curl+")\""))
	if err := os.WriteFile(filepath.Join(wsA, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ra := <-a
	if strings.TrimSpace(b.Stdout) != "neighbour authorized" || b.Exit != 0 {
		t.Errorf("the other tenant's call: exit %d, %q %q, want its request authorized during the flood", b.Exit, b.Stdout, b.Stderr)
	}
	var closed int
	fmt.Sscanf(ra.Stdout, "closed %d", &closed)
	// at least the excess: the cap's connections stay open while they are idle less than
	// inject.HeadWait, the others are closed as they come (on a slow machine some of the
	// first may reach HeadWait too: the cap's own count is the refused metric below)
	if ra.Exit != 0 || closed < excess || !strings.Contains(ra.Stdout, "after authorized") {
		t.Errorf("the flooding call: exit %d, %q %q, want %d connections closed at once and its request authorized after the flood", ra.Exit, ra.Stdout, ra.Stderr, excess)
	}
	if v, err := promscrape.Value(d.Metrics, "berm_inject_connections_refused_total"); err != nil || v < float64(excess) {
		t.Errorf("berm_inject_connections_refused_total %v (%v), want %d at least", v, err, excess)
	}
	alerts := ""
	for _, ev := range bermbin.Timeline(t, d.State, "inject-flood").Events {
		if ev.Kind == event.KindAlert && ev.Alert != nil && ev.Alert.RuleID == "inject-connection-cap" {
			alerts += ev.Alert.Output + "\n"
		}
	}
	var total int
	if _, tail, ok := strings.Cut(alerts, "): "); ok {
		fmt.Sscanf(tail, "%d connections", &total)
	}
	if total < excess {
		t.Errorf("no inject-connection-cap alert counting %d refused connections: %q", excess, alerts)
	}
}
