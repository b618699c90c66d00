package sandboxer_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

type listener struct {
	ln       net.Listener
	accepted atomic.Int64
}

func listen(t *testing.T, network, addr string) *listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

func port(l *listener) int { return l.ln.Addr().(*net.TCPAddr).Port }

func netPolicy(t *testing.T, mode string, allowPorts ...int) string {
	t.Helper()
	var egress strings.Builder
	for _, p := range allowPorts {
		fmt.Fprintf(&egress, "      - {cidr: 127.0.0.1/32, ports: [%d], protocol: tcp}\n", p)
	}
	if len(allowPorts) == 0 {
		egress.WriteString("      []\n")
	}
	body := fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: net-test}
spec:
  mode: %s
  isolation: {network: host-filtered}
  network:
    egress:
%s`, mode, egress.String())
	body = strings.Replace(body, "    egress:\n      []\n", "    egress: []\n", 1)
	path := filepath.Join(t.TempDir(), "net.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const netScript = `import socket, sys
def tcp(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.connect(addr); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
    finally:
        s.close()
def udp(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", addr); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
def netlink():
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
def raw():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); return "ok"
    except OSError as e:
        return "errno%d" % e.errno
allowed, v4, v6, udpport = [int(x) for x in sys.argv[1:5]]
print("allowed", tcp(socket.AF_INET, ("127.0.0.1", allowed)))
print("v4", tcp(socket.AF_INET, ("127.0.0.1", v4)))
print("v6", tcp(socket.AF_INET6, ("::1", v6)))
print("mapped", tcp(socket.AF_INET6, ("::ffff:127.0.0.1", v4)))
print("udp", udp(("127.0.0.1", udpport)))
print("raw", raw())
print("netlink", netlink())
`

// Egress is default-deny across every address family; audit mode lets everything through
// and records what would have been refused.
func TestNetworkEgress(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, mode := range []string{"enforce", "audit"} {
		t.Run(mode, func(t *testing.T) {
			allowed := listen(t, "tcp4", "127.0.0.1:0")
			denied4 := listen(t, "tcp4", "127.0.0.1:0")
			denied6 := listen(t, "tcp6", "[::1]:0")
			udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer udp.Close()
			var udpGot atomic.Int64
			go func() {
				buf := make([]byte, 16)
				for {
					if _, _, err := udp.ReadFrom(buf); err != nil {
						return
					}
					udpGot.Add(1)
				}
			}()
			state, ws := t.TempDir(), bermbin.Workspace(t)
			pol := netPolicy(t, mode, port(allowed))
			id := "net-" + mode
			r := run(t, state, "--call-id", id, "--workspace", ws, "--policy", pol, "--",
				"python3", "-c", netScript, fmt.Sprint(port(allowed)), fmt.Sprint(port(denied4)), fmt.Sprint(port(denied6)),
				fmt.Sprint(udp.LocalAddr().(*net.UDPAddr).Port))
			if r.Exit != 0 {
				t.Fatalf("exit %d: %s %s", r.Exit, r.Stdout, r.Stderr)
			}
			time.Sleep(100 * time.Millisecond)
			got := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
				if k, v, ok := strings.Cut(l, " "); ok {
					got[k] = v
				}
			}
			if got["allowed"] != "ok" || allowed.accepted.Load() == 0 {
				t.Errorf("allowed connect: %q, accepted %d", got["allowed"], allowed.accepted.Load())
			}
			tl := bermbin.Timeline(t, state, id)
			if mode == "enforce" {
				for _, k := range []string{"v4", "v6", "mapped", "udp", "raw"} {
					if got[k] != "errno1" {
						t.Errorf("%s: %q, want EPERM (errno1)", k, got[k])
					}
				}
				if got["netlink"] != "errno97" { // the seccomp family allowlist answers EAFNOSUPPORT
					t.Errorf("netlink: %q, want EAFNOSUPPORT (errno97)", got["netlink"])
				}
				if denied4.accepted.Load()+denied6.accepted.Load() != 0 || udpGot.Load() != 0 {
					t.Errorf("denied listeners received %d/%d connections, udp %d datagrams", denied4.accepted.Load(), denied6.accepted.Load(), udpGot.Load())
				}
			} else {
				for _, k := range []string{"v4", "v6", "mapped", "udp", "netlink"} {
					if got[k] != "ok" {
						t.Errorf("audit mode blocked %s: %q", k, got[k])
					}
				}
			}
			audit := mode == "audit"
			if !audit && findDenial(tl.Events, "capabilities", "protocol 1)", false) == nil {
				t.Errorf("no denial for the raw socket: %+v", denials(tl.Events))
			}
			if findDenial(tl.Events, "seccomp", "socket", audit) == nil {
				t.Errorf("no seccomp denial (audit=%v) for the netlink socket: %+v", audit, denials(tl.Events))
			}
			for _, obj := range []string{fmt.Sprintf("127.0.0.1:%d", port(denied4)), fmt.Sprintf("[::1]:%d", port(denied6)),
				fmt.Sprintf("127.0.0.1:%d", udp.LocalAddr().(*net.UDPAddr).Port)} {
				if d := findDenial(tl.Events, event.LayerCgroupSock, obj, audit); d == nil {
					t.Errorf("no bpf-cgroup-sock denial (audit=%v) for %s: %+v", audit, obj, denials(tl.Events))
				}
			}
		})
	}
}

// A running call gains and then loses access to an address when its policy file changes.
func TestNetworkHotReload(t *testing.T) {
	bermbin.RequireRoot(t)
	target := listen(t, "tcp4", "127.0.0.1:0")
	state, ws := t.TempDir(), bermbin.Workspace(t)
	pol := netPolicy(t, "enforce")
	script := fmt.Sprintf(`import socket, time, os, sys
while not os.path.exists("stop"):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", %d)); print("ok", flush=True)
    except OSError as e:
        print("errno%%d" %% e.errno, flush=True)
    s.close()
    time.sleep(0.05)
`, port(target))
	cmd := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--no-rules", "--call-id", "reload",
		"--workspace", ws, "--policy", pol, "--timeout", "60s", "--", "python3", "-c", script)
	call := startLineCall(t, cmd)
	call.waitFor(t, "errno1", 3)
	os.WriteFile(pol, []byte(strings.Replace(mustRead(t, pol), "egress: []", fmt.Sprintf("egress:\n      - {cidr: 127.0.0.1/32, ports: [%d], protocol: tcp}", port(target)), 1)), 0o644)
	call.waitFor(t, "ok", 3)
	before := target.accepted.Load()
	if before == 0 {
		t.Fatal("listener saw nothing after the policy allowed it")
	}
	os.WriteFile(pol, []byte(strings.Replace(mustRead(t, pol), fmt.Sprintf("egress:\n      - {cidr: 127.0.0.1/32, ports: [%d], protocol: tcp}", port(target)), "egress: []", 1)), 0o644)
	call.waitFor(t, "errno1", 5)
	after := target.accepted.Load()
	os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
	call.cmd.Wait()
	time.Sleep(50 * time.Millisecond)
	if target.accepted.Load() != after {
		t.Errorf("connections accepted after access was revoked")
	}
	tl := bermbin.Timeline(t, state, "reload")
	reloads := 0
	for _, e := range tl.Events {
		if e.Kind == event.KindReload && e.Reload != nil && e.Reload.Applied && e.Reload.Surface == "network" {
			reloads++
			if e.Reload.Generation != uint64(reloads) {
				t.Errorf("reload %d has generation %d", reloads, e.Reload.Generation)
			}
		}
		if e.Limit != nil && e.Limit.Resource == "policy_reload" {
			t.Errorf("a policy reload recorded as a limit: %+v", e.Limit)
		}
	}
	if reloads != 2 {
		t.Errorf("%d policy reloads in the timeline, want 2", reloads)
	}
}

// lineCall is a running call whose output a test reads line by line: a tool that keeps
// trying, to see a policy reload take effect.
type lineCall struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// startLineCall starts cmd (berm run) with its stdout read by the test; it is killed when the
// test ends.
func startLineCall(t *testing.T, cmd *exec.Cmd) *lineCall {
	t.Helper()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return &lineCall{cmd, bufio.NewScanner(out)}
}

// waitFor reads the call's output until n consecutive lines are want.
func (c *lineCall) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	seen := 0
	for c.lines.Scan() {
		if c.lines.Text() == want {
			if seen++; seen >= n {
				return
			}
		} else {
			seen = 0
		}
	}
	t.Fatalf("call output ended before %d consecutive %q", n, want)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
