package policy

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const header = "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata:\n  name: t\n"

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yaml  string
		check func(t *testing.T, p *Policy)
	}{
		{"omitted spec fields take strict values", header + "spec: {}\n", func(t *testing.T, p *Policy) {
			s := Strict().Spec
			if p.Spec.Mode != Enforce || p.Spec.Resources != s.Resources || !slices.Equal(p.Spec.Syscalls.Deny, s.Syscalls.Deny) ||
				!slices.Equal(p.Spec.Filesystem.Read, s.Filesystem.Read) || !p.Spec.Syscalls.DenyNewNamespaces {
				t.Errorf("got %+v", p.Spec)
			}
		}},
		{"values", header + `spec:
  mode: audit
  isolation: {network: host-filtered, capabilities: []}
  resources: {memory: 1Gi, pids: 10, cpus: 500m, wallTime: 90s, outputBytes: 1000, tmpSize: 2M, tmpInodes: 64, disk: 3Gi, inodes: 500}
  filesystem: {read: ["${WORKSPACE}/src"], write: [], exec: ["/opt/tool"], deny: [], allowSpecialFiles: true}
  network:
    egress:
      - {cidr: 10.0.0.0/8, ports: [443, "8000-8100"]}
      - {cidr: "2001:db8::1", ports: [53], protocol: udp}
`, func(t *testing.T, p *Policy) {
			r := p.Spec.Resources
			if p.Spec.Mode != Audit || r.MemoryBytes != 1<<30 || r.Pids != 10 || r.MilliCPUs != 500 ||
				r.WallTime != 90*time.Second || r.OutputBytes != 1000 || r.TmpSizeBytes != 2e6 ||
				r.TmpInodes != 64 || r.DiskBytes != 3<<30 || r.Inodes != 500 {
				t.Errorf("resources %+v", r)
			}
			if !p.Spec.Filesystem.AllowSpecialFiles {
				t.Error("allowSpecialFiles: true was not read")
			}
			e := p.Spec.Network.Egress
			if len(e) != 2 || e[0].CIDR != netip.MustParsePrefix("10.0.0.0/8") || e[0].Protocol != TCP ||
				!slices.Equal(e[0].Ports, []PortRange{{443, 443}, {8000, 8100}}) ||
				e[1].CIDR != netip.MustParsePrefix("2001:db8::1/128") || e[1].Protocol != UDP {
				t.Errorf("egress %+v", e)
			}
			if p.Spec.Filesystem.Write == nil || len(p.Spec.Filesystem.Write) != 0 {
				t.Errorf("explicit empty write list became %v", p.Spec.Filesystem.Write)
			}
		}},
		{"allow list", header + "spec:\n  syscalls: {allow: [read, write], defaultAction: kill}\n", func(t *testing.T, p *Policy) {
			s := p.Spec.Syscalls
			if len(s.Deny) != 0 || !slices.Equal(s.Allow, []string{"read", "write"}) || s.DefaultAction != ActionKill {
				t.Errorf("syscalls %+v", s)
			}
		}},
		{"cpus as float", header + "spec:\n  resources: {cpus: 1.5}\n", func(t *testing.T, p *Policy) {
			if p.Spec.Resources.MilliCPUs != 1500 {
				t.Errorf("cpus %d", p.Spec.Resources.MilliCPUs)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, p)
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // every error, in order
	}{
		{"bad size", header + "spec:\n  resources:\n    memory: lots\n",
			[]string{`p.yaml:7:13: spec.resources.memory: expected a size like 512Mi, got "lots"`}},
		{"bad quotas", header + "spec:\n  resources: {disk: 0, inodes: -1, tmpInodes: many}\n",
			[]string{
				`p.yaml:6:21: spec.resources.disk: expected a size like 512Mi, got 0`,
				`p.yaml:6:32: spec.resources.inodes: expected a positive whole number, got -1`,
				`p.yaml:6:47: spec.resources.tmpInodes: expected a positive whole number, got "many"`,
			}},
		{"unknown fields everywhere, all reported", header + "spec:\n  resource: {}\n  filesystem:\n    reads: []\nextra: 1\n",
			[]string{
				`p.yaml:6:3: spec.resource: unknown field, expected one of approvals, credentials, filesystem, isolation, mode, network, observability, output, resources, syscalls`,
				`p.yaml:8:5: spec.filesystem.reads: unknown field, expected one of allowSpecialFiles, deny, exec, read, write`,
				`p.yaml:9:1: extra: unknown field, expected one of apiVersion, extends, kind, metadata, spec`,
			}},
		{"missing top level", "kind: ToolPolicy\n",
			[]string{`p.yaml:1:1: apiVersion: required field missing`, `p.yaml:1:1: metadata: required field missing`, `p.yaml:1:1: spec: required field missing`}},
		{"wrong api version", "apiVersion: v1\nkind: Pod\nmetadata: {name: t}\nspec: {}\n",
			[]string{`p.yaml:1:13: apiVersion: expected berm.dev/v1alpha1, got "v1"`, `p.yaml:2:7: kind: expected ToolPolicy, got "Pod"`}},
		{"bad name", "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: Web Fetch}\nspec: {}\n",
			[]string{`p.yaml:3:18: metadata.name: expected a name of at most 63 lowercase letters, digits, '-', '.', '_', got "Web Fetch"`}},
		{"paths", header + "spec:\n  filesystem:\n    read: [relative, /a/../b, \"${HOME}/x\", \"/x/${TMP}\", 3, /ok/]\n",
			[]string{
				`p.yaml:7:12: spec.filesystem.read[0]: expected an absolute path or one starting with ${WORKSPACE} or ${TMP}, got "relative"`,
				`p.yaml:7:22: spec.filesystem.read[1]: expected a clean path (no '.', '..', '//' or trailing '/'), got "/a/../b"`,
				`p.yaml:7:31: spec.filesystem.read[2]: expected an absolute path or one starting with ${WORKSPACE} or ${TMP} (placeholders only at the start), got "${HOME}/x"`,
				`p.yaml:7:44: spec.filesystem.read[3]: expected an absolute path or one starting with ${WORKSPACE} or ${TMP} (placeholders only at the start), got "/x/${TMP}"`,
				`p.yaml:7:57: spec.filesystem.read[4]: expected an absolute path or one starting with ${WORKSPACE} or ${TMP}, got 3`,
				`p.yaml:7:60: spec.filesystem.read[5]: expected a clean path (no '.', '..', '//' or trailing '/'), got "/ok/"`,
			}},
		{"egress", header + "spec:\n  isolation: {network: host-filtered}\n  network:\n    egress:\n      - {cidr: 10.1.2.3/8, ports: [0, 70000, 9-3, 443]}\n      - {cidr: nope, ports: [], protocol: icmp}\n      - {ports: [1]}\n",
			[]string{
				`p.yaml:9:16: spec.network.egress[0].cidr: expected a CIDR without host bits (10.0.0.0/8), got "10.1.2.3/8"`,
				`p.yaml:9:36: spec.network.egress[0].ports[0]: expected a port (1-65535) or a range like 8000-8100, got 0`,
				`p.yaml:9:39: spec.network.egress[0].ports[1]: expected a port (1-65535) or a range like 8000-8100, got 70000`,
				`p.yaml:9:46: spec.network.egress[0].ports[2]: expected a port (1-65535) or a range like 8000-8100, got "9-3"`,
				`p.yaml:10:16: spec.network.egress[1].cidr: expected a CIDR like 10.0.0.0/8 or an address, got "nope"`,
				`p.yaml:10:29: spec.network.egress[1].ports: expected at least one port or range (1-65535 for all), got an empty list`,
				`p.yaml:10:43: spec.network.egress[1].protocol: expected tcp or udp, got "icmp"`,
				`p.yaml:11:9: spec.network.egress[2].cidr: required field missing (or domain)`,
			}},
		{"egress domains", header + "spec:\n  isolation: {network: host-filtered}\n  network:\n    egress:\n      - {domain: \"a..b\", ports: [443]}\n      - {domain: \"x.*.org\", ports: [443]}\n      - {domain: -bad.org, ports: [443]}\n      - {domain: \"caf\u00e9.org\", ports: [443]}\n      - {domain: a.org, cidr: 10.0.0.0/8, ports: [443]}\n      - {domain: 3, ports: [443]}\n",
			[]string{
				`p.yaml:9:18: spec.network.egress[0].domain: expected a domain like api.github.com or *.pypi.org, got "a..b": an empty label (two dots, or a leading or trailing dot)`,
				`p.yaml:10:18: spec.network.egress[1].domain: expected a domain like api.github.com or *.pypi.org, got "x.*.org": a wildcard is allowed only as the whole first label (*.example.com)`,
				`p.yaml:11:18: spec.network.egress[2].domain: expected a domain like api.github.com or *.pypi.org, got "-bad.org": label "-bad" starts or ends with '-'`,
				`p.yaml:12:18: spec.network.egress[3].domain: expected a domain like api.github.com or *.pypi.org, got "café.org": label "café" has 'é': letters, digits, '-' and '_' only`,
				`p.yaml:13:18: spec.network.egress[4].domain: expected cidr or domain, got both`,
				`p.yaml:14:18: spec.network.egress[5].domain: expected a domain like api.github.com or *.pypi.org, got 3`,
			}},
		{"egress allowPrivate", header + "spec:\n  isolation: {network: host-filtered}\n  network:\n    egress:\n      - {cidr: 10.0.0.0/8, ports: [443], allowPrivate: true}\n      - {domain: a.org, ports: [443], allowPrivate: yes please}\n      - {domain: a.org, ports: [443], allowPrivate: true}\n",
			[]string{
				`p.yaml:9:56: spec.network.egress[0].allowPrivate: expected only on a domain rule (a cidr rule names its addresses itself), got true`,
				`p.yaml:10:53: spec.network.egress[1].allowPrivate: expected true or false, got "yes please"`,
			}},
		{"egress without host network", header + "spec:\n  network:\n    egress: [{cidr: 10.0.0.0/8, ports: [1]}]\n",
			[]string{`p.yaml:7:13: spec.network.egress: egress rules need spec.isolation.network: host-filtered, got none`}},
		{"syscalls", header + "spec:\n  syscalls: {deny: [ptrace, nosuch, ptrace], defaultAction: kill}\n",
			[]string{
				`p.yaml:6:29: spec.syscalls.deny[1]: expected an x86-64 syscall name like ptrace, got "nosuch"`,
				`p.yaml:6:61: spec.syscalls.defaultAction: only meaningful with allow (a deny list allows everything else)`,
			}},
		{"duplicate syscall", header + "spec:\n  syscalls: {deny: [ptrace, bpf, ptrace]}\n",
			[]string{`p.yaml:6:34: spec.syscalls.deny[2]: ptrace listed twice`}},
		{"allow without default", header + "spec:\n  syscalls: {allow: [read]}\n",
			[]string{`p.yaml:6:13: spec.syscalls.defaultAction: required with allow: errno, kill or log`}},
		{"both lists", header + "spec:\n  syscalls: {allow: [read], deny: [bpf], defaultAction: log}\n",
			[]string{`p.yaml:6:13: spec.syscalls: expected either deny or allow, got both`}},
		{"types", header + "spec:\n  mode: [enforce]\n  resources: {pids: -1, cpus: 0, wallTime: 5}\n  isolation: {capabilities: [CAP_FLY]}\n  syscalls: {denyNewNamespaces: yes}\n",
			[]string{
				`p.yaml:6:9: spec.mode: expected enforce or audit, got a list`,
				`p.yaml:7:21: spec.resources.pids: expected a positive whole number, got -1`,
				`p.yaml:7:31: spec.resources.cpus: expected a CPU count like 1, 0.5 or 500m, got 0`,
				`p.yaml:7:44: spec.resources.wallTime: expected a duration like 5m or 90s, got 5`,
				`p.yaml:8:30: spec.isolation.capabilities[0]: expected a capability name like CAP_NET_BIND_SERVICE, got "CAP_FLY"`,
				`p.yaml:9:33: spec.syscalls.denyNewNamespaces: expected true or false, got "yes"`,
			}},
		{"capabilities are not kept", header + "spec:\n  isolation:\n    capabilities:\n      - CAP_NET_BIND_SERVICE\n",
			[]string{`p.yaml:8:9: spec.isolation.capabilities[0]: CAP_NET_BIND_SERVICE: keeping capabilities is not supported (the tool runs with none); expected an empty list`}},
		{"approvals without rules", header + "spec:\n  approvals: {}\n",
			[]string{`p.yaml:6:14: spec.approvals.rules: required field missing`}},
		{"duplicate key", header + "spec:\n  mode: audit\n  mode: enforce\n",
			[]string{`p.yaml:7:3: spec.mode: field given twice`}},
		{"syntax", header + "spec:\n  mode: [\n", []string{`p.yaml:6:1: invalid yaml: did not find expected node content`}},
		{"empty", "", []string{`p.yaml:1:1: empty policy: expected a ToolPolicy document`}},
		{"two documents", header + "spec: {}\n---\n" + header + "spec: {}\n", []string{`p.yaml:6:1: expected one document, found another`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.yaml))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("got %v, want Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestStrict(t *testing.T) {
	p := Strict()
	if p.Metadata.Name != "strict" || p.Spec.Mode != Enforce || p.Spec.Isolation.Network != NetworkNone ||
		len(p.Spec.Isolation.Capabilities) != 0 || len(p.Spec.Network.Egress) != 0 || !p.Spec.Syscalls.DenyNewNamespaces {
		t.Fatalf("strict: %+v", p.Spec)
	}
	for _, s := range []string{"mount", "umount2", "pivot_root", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
		"perf_event_open", "init_module", "finit_module", "kexec_load", "kexec_file_load", "setns", "keyctl", "add_key",
		"request_key", "userfaultfd", "io_uring_setup", "open_by_handle_at"} {
		if !slices.Contains(p.Spec.Syscalls.Deny, s) {
			t.Errorf("strict does not deny %s", s)
		}
	}
	for _, d := range []string{"/home", "/root", "/var", "/run"} {
		if !slices.Contains(p.Spec.Filesystem.Deny, d) {
			t.Errorf("strict does not deny %s", d)
		}
	}
	if !slices.Equal(p.Spec.Filesystem.Write, []string{Workspace, Tmp, "/dev/null"}) {
		t.Errorf("strict writes %v", p.Spec.Filesystem.Write)
	}
	// a copy: changing it leaves the built-in alone
	p.Spec.Filesystem.Write[0] = "/"
	if Strict().Spec.Filesystem.Write[0] != Workspace {
		t.Fatal("Strict returned shared state")
	}
	// the embedded file is what users copy: it must load as a policy file too
	if _, err := Parse("strict.yaml", StrictYAML()); err != nil {
		t.Fatal(err)
	}
}

func TestCheckMain(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(header+"spec: {mode: enforce}\n"), 0o600)
	os.WriteFile(bad, []byte(header+"spec:\n  resources: {memory: lots, pids: 0}\n"), 0o600)
	caps := filepath.Join(dir, "caps.yaml")
	os.WriteFile(caps, []byte(header+"spec:\n  isolation: {capabilities: [CAP_NET_RAW]}\n"), 0o600)
	fatal := filepath.Join(dir, "fatal.yaml")
	os.WriteFile(fatal, []byte(header+"spec:\n  syscalls:\n    fatal: [ptrace, getpid]\n"), 0o600)
	for _, tc := range []struct {
		name     string
		args     []string
		rc       int
		out, err string
	}{
		{"ok", []string{good}, 0, good + ": ok\n", ""},
		{"errors", []string{good, bad}, 1, good + ": ok\n",
			bad + `:6:23: spec.resources.memory: expected a size like 512Mi, got "lots"` + "\n" +
				bad + `:6:35: spec.resources.pids: expected a positive whole number, got 0` + "\n"},
		{"capabilities", []string{caps}, 1, "",
			caps + `:6:30: spec.isolation.capabilities[0]: CAP_NET_RAW: keeping capabilities is not supported (the tool runs with none); expected an empty list` + "\n"},
		{"fatal not denied", []string{fatal}, 1, "",
			fatal + `:7:21: spec.syscalls.fatal[1]: getpid is not denied by this policy: only a refused attempt can be fatal` + "\n"},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, 1, "", "read policy: open " + filepath.Join(dir, "nope.yaml") + ": no such file or directory\n"},
		{"no args", nil, 2, "", "usage: berm policy check FILE...\n"},
		{"flag", []string{"-v", good}, 2, "", "usage: berm policy check FILE...\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if rc := CheckMain(tc.args, &out, &errb); rc != tc.rc || out.String() != tc.out || errb.String() != tc.err {
				t.Errorf("rc %d\nstdout %q\nstderr %q", rc, out.String(), errb.String())
			}
		})
	}
}
