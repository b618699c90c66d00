package dashboards

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/dnstest"
	promtest "github.com/bermsec/berm/testenv/prometheus"
	"github.com/bermsec/berm/testenv/promscrape"
)

// daemonFixture is a real bermd shipping to a real ClickHouse (--clickhouse) and scraped by a
// real Prometheus, after calls through it that exercise what the agent-health, approval and
// DNS panels show: a warm and a cold launch, a flood, approvals decided through the API (deny,
// approve, no answer), a networked call's DNS queries (allowed, refused, a tunnelling-shaped
// name, a planted hostile name); and a call of a second host (another UTS name) shipped to the
// same ClickHouse.
type daemonFixture struct {
	state, socket, metrics string
	dsn                    string
	ch                     *chtest.Server
	prom                   *promtest.Server
	approvals              *approval.Client
	log                    *bytes.Buffer
	since                  time.Time
	keys                   map[string]string // call id -> call key
	host, otherHost        string
	floodDropped           uint64    // events the flooder's record says were dropped
	calls                  int       // calls bermd served
	idleFrom, idleTo       time.Time // bermd served nothing (browser fixture)
}

const otherHost = "berm-dash-host-b"

// plantedDNS is a name label a tool inside the sandbox sends in a raw DNS query: SQL and
// template syntax, and text shaped like the detail JSON's answers field, none of which may
// become an answer or leave its cell.
const plantedDNS = `x' or 1=1 -- ${tenant} "answers":["6"]`

func newDaemonFixture(t *testing.T) *daemonFixture {
	t.Helper()
	bermbin.RequireRoot(t)
	f := &daemonFixture{since: time.Now().Add(-time.Minute), keys: map[string]string{}, log: &bytes.Buffer{}, otherHost: otherHost}
	f.host, _ = os.Hostname()
	f.ch = chtest.ForTest(t, chtest.Config{})
	f.dsn = f.ch.DSN("berm")
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{f.ch.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(t.Context(), "CREATE DATABASE IF NOT EXISTS berm"); err != nil {
		t.Fatal(err)
	}

	// the upstream DNS server and a service at allowed.test's address
	svc, err := net.Listen("tcp4", "127.0.0.21:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	svcPort := svc.Addr().(*net.TCPAddr).Port
	up := dnstest.Start(t, dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.21", 60)}})

	f.startBermd(t, up.Addr)
	f.prom = promtest.ForTest(t, promtest.Config{Targets: []string{f.metrics}})
	// bermd's counters are scraped at 0 before the calls: a first sample already at 1 is no
	// increase to rate()
	if _, err := f.prom.Wait(`up{job="berm"}`, time.Minute, func(s []promtest.Sample) bool { return len(s) == 1 && s[0].Value == 1 }); err != nil {
		t.Fatal(err)
	}

	// a warm launch (the default tenant is warmed at start), then a cold one (a tenant with none)
	f.settled(t)
	f.mustRun(t, 0, "warm", "--tenant", "default", "--tool", "shell", "--", "/bin/true")
	f.mustRun(t, 0, "cold", "--tenant", "other", "--tool", "shell", "--", "/bin/true")
	f.flood(t)
	f.approve(t)
	f.dns(t, up, svcPort)
	if accepted.Load() == 0 {
		t.Errorf("the networked call's connect to allowed.test did not arrive")
	}
	f.secondHost(t)

	// everything bermd served is in ClickHouse, and Prometheus has scraped its last counts
	want := uint64(f.calls + 1)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		if err := conn.QueryRow(t.Context(), "SELECT count() FROM (SELECT DISTINCT call_key FROM berm.calls)").Scan(&n); err == nil && n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse has %d of %d call records after 2 minutes\n%s", n, want, f.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := f.prom.Wait(`sum(berm_calls_total)`, time.Minute, func(s []promtest.Sample) bool {
		return len(s) == 1 && int(s[0].Value) >= f.calls
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few more scrapes after the last change, so every rate has its points
	return f
}

func (f *daemonFixture) startBermd(t *testing.T, upstream string) {
	t.Helper()
	dir := t.TempDir()
	port, err := chtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	f.state, f.socket, f.metrics = filepath.Join(dir, "state"), filepath.Join(dir, "bermd.sock"), fmt.Sprintf("127.0.0.1:%d", port)
	apiDir, tokenFile := filepath.Join(dir, "approvals"), filepath.Join(dir, "approvals.token")
	cmd := exec.Command(bermbin.Path(t, "bermd"), "--state-dir", f.state, "--socket", f.socket, "--metrics", f.metrics,
		"--clickhouse", f.dsn, "--approvals-dir", apiDir, "--approvals-token", tokenFile, "--dns-upstream", upstream)
	cmd.Stderr = f.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("bermd log:\n%s", f.log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(f.socket); err == nil {
			if _, err := os.Stat(tokenFile); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("bermd did not start:\n%s", f.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := approval.ReadToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	f.approvals = &approval.Client{Dir: apiDir, Token: tok}
}

func (f *daemonFixture) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, err := promscrape.Value(f.metrics, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// settled waits until bermd has a warm sandbox ready and starts none.
func (f *daemonFixture) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for f.metric(t, "berm_sandboxes_starting") != 0 || f.metric(t, "berm_sandboxes_warm") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("bermd did not settle with a warm sandbox")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start starts a call through bermd; wait gives its result.
func (f *daemonFixture) start(t *testing.T, id string, args ...string) (wait func() bermbin.Result) {
	t.Helper()
	f.calls++
	cmd := exec.Command(bermbin.Path(t, "berm"), append([]string{"run", "--socket", f.socket, "--daemon", "required", "--call-id", id}, args...)...)
	done := bermbin.Start(t, cmd)
	return func() bermbin.Result {
		r := <-done
		f.keys[id] = f.key(t, id)
		return r
	}
}

func (f *daemonFixture) mustRun(t *testing.T, exit int, id string, args ...string) bermbin.Result {
	t.Helper()
	r := f.start(t, id, args...)()
	if r.Exit != exit {
		t.Fatalf("call %s: exit %d, want %d\nstdout: %s\nstderr: %s", id, r.Exit, exit, r.Stdout, r.Stderr)
	}
	return r
}

func (f *daemonFixture) key(t *testing.T, id string) string {
	t.Helper()
	for _, c := range bermbin.Calls(t, f.state) {
		if c.Start.CallID == id && c.Record != nil {
			return c.Record.CallKey
		}
	}
	t.Fatalf("call %s has no record in bermd's journal", id)
	return ""
}

// flood: a call whose every getppid is an event, for a few seconds; past its budget the
// kernel counts them, and what the ring or the queues could not take is dropped and counted.
func (f *daemonFixture) flood(t *testing.T) {
	t.Helper()
	ws := bermbin.Workspace(t)
	build := exec.Command("go", "build", "-o", filepath.Join(ws, "sysloop"), "./testenv/bench/sysloop")
	build.Dir = bermbin.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sysloop: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "flood.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: flood}\nspec:\n  filesystem:\n    exec: [\"${WORKSPACE}\", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]\n"), 0o644)
	f.mustRun(t, 0, "flood", "--tenant", "noisy", "--tool", "flooder", "--workspace", ws, "--policy", pol, "--trace-syscall", "getppid",
		"--", "/bin/sh", "-c", `end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do ./sysloop 1000000 >/dev/null || exit; done`)
	for _, c := range bermbin.Calls(t, f.state) {
		if c.Start.CallID == "flood" {
			f.floodDropped = c.Record.Dropped.Kernel + c.Record.Dropped.User
			t.Logf("flood: %d events, %d aggregated, dropped %+v", c.Record.Events, c.Record.Aggregated, c.Record.Dropped)
		}
	}
}

const dashApprovalPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dash-approvals}
spec:
  approvals:
    timeout: 4s
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
        approvers: [reports-owner]
`

// approve: a call deletes three reports, each held for a decision: the first denied, the
// second approved (both through the API, as berm deny/approve do), the third never answered
// (a deny at the timeout).
func (f *daemonFixture) approve(t *testing.T) {
	t.Helper()
	ws := bermbin.Workspace(t)
	os.MkdirAll(filepath.Join(ws, "reports"), 0o755)
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(ws, "reports", n), []byte(n), 0o644)
	}
	filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	pol := filepath.Join(t.TempDir(), "approvals.yaml")
	os.WriteFile(pol, []byte(dashApprovalPolicy), 0o644)
	wait := f.start(t, "approvals", "--tenant", "default", "--tool", "cleaner", "--workspace", ws, "--policy", pol,
		"--", "/bin/sh", "-c", "rm -f reports/a; echo a=$?; rm -f reports/b; echo b=$?; rm -f reports/c; echo c=$?")
	seen := map[string]bool{}
	for _, approve := range []bool{false, true} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			list, err := f.approvals.List()
			if err != nil {
				t.Fatal(err)
			}
			var id string
			for _, p := range list {
				if p.CallID == "approvals" && !seen[p.ID] {
					id = p.ID
				}
			}
			if id != "" {
				seen[id] = true
				if err := f.approvals.Decide(id, approve, "reports-owner", "dashboards test"); err != nil {
					t.Fatal(err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no approval request of the call in 60 s\n%s", f.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	r := wait()
	if _, err := os.Stat(filepath.Join(ws, "reports", "b")); err == nil {
		t.Errorf("reports/b, approved, is still there")
	}
	for _, n := range []string{"a", "c"} {
		if _, err := os.Stat(filepath.Join(ws, "reports", n)); err != nil {
			t.Errorf("reports/%s, not approved, is gone: %v\n%s", n, err, r.Stdout)
		}
	}
}

// dnsScript resolves an allowed name and connects to it, asks for names the policy does not
// allow (one with a 55-character label, a tunnel's shape), and sends a raw query whose label
// is planted text.
const dnsScript = `import socket, struct, sys
port = int(sys.argv[1])
addr = socket.getaddrinfo("allowed.test", port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
s = socket.socket(); s.connect(addr); s.close(); print("connected", addr[0])
for name in ["denied.test", "a" * 55 + ".t.evil.test"]:
    try:
        socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)
        print("resolved", name)
    except socket.gaierror:
        print("refused", name)
def raw(labels):
    pkt = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    for l in labels:
        pkt += bytes([len(l)]) + l
    pkt += b"\x00" + struct.pack(">HH", 1, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
    u.sendto(pkt, ("192.0.2.53", 53))
    try:
        r = u.recv(4096); print("raw rcode", r[3] & 15)
    except OSError as e:
        print("raw", e)
raw([sys.argv[2].encode(), b"evil", b"test"])
`

func (f *daemonFixture) dns(t *testing.T, up *dnstest.Server, port int) {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "dns.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dash-dns}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: [%d], allowPrivate: true} # the test upstream answers on loopback
`, port)), 0o644)
	r := f.mustRun(t, 0, "dns", "--tenant", "default", "--tool", "fetcher", "--workspace", bermbin.Workspace(t), "--policy", pol,
		"--", "python3", "-c", dnsScript, fmt.Sprint(port), plantedDNS)
	for _, want := range []string{"connected 127.0.0.21", "refused denied.test", "refused " + strings.Repeat("a", 55)} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dns call: no %q in\n%s%s", want, r.Stdout, r.Stderr)
		}
	}
	if n := up.Count("denied.test"); n != 0 {
		t.Errorf("the upstream was asked for denied.test %d times", n)
	}
}

// secondHost runs a call on "another host": berm run (embedded) in a UTS namespace with its
// own host name, shipped to the same ClickHouse by a collector of its own.
func (f *daemonFixture) secondHost(t *testing.T) {
	t.Helper()
	state := t.TempDir()
	cmd := exec.Command("unshare", "--uts", "/bin/sh", "-c", `hostname "$1" && exec "$2" run --daemon never --state-dir "$3" --tenant other --tool remote --call-id remote -- /bin/true`,
		"sh", otherHost, bermbin.Path(t, "berm"), state)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("a call on the second host: %v\n%s", err, out)
	}
	c, err := collector.New(collector.Config{StateDir: state, DSN: f.dsn, BatchInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.RunOnce(ctx); err != nil {
		t.Fatalf("ship the second host's journal: %v", err)
	}
	for _, c := range bermbin.Calls(t, state) {
		if c.Record == nil || c.Record.Node != otherHost {
			t.Fatalf("the second host's call: node %q, want %q", c.Start.Node, otherHost)
		}
	}
}
