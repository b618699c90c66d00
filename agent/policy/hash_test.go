package policy

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"testing"
)

// fmtEncoding is the canonical encoding written through fmt alone, line by line, as Hash
// digested it before appendEncoding: every hash recorded so far is of these bytes.
func fmtEncoding(c *Compiled, w io.Writer) {
	q := strconv.Quote
	c.encodeHead(w)
	for _, r := range c.Landlock.Paths {
		fmt.Fprintf(w, "path %s %#x\n", q(c.unplace(r.Path)), r.Access)
	}
	for _, r := range c.Landlock.Ports {
		fmt.Fprintf(w, "port %d %#x\n", r.Port, r.Access)
	}
	for _, in := range c.Seccomp {
		fmt.Fprintf(w, "bpf %04x %02x %02x %08x\n", in.Code, in.Jt, in.Jf, in.K)
	}
	c.encodeNetworkRules(w)
	for _, s := range c.Network.Sockets {
		fmt.Fprintf(w, "socket %d %d\n", s.Family, s.Type)
	}
	for _, r := range c.Rules {
		fmt.Fprintf(w, "rule %d %s %s %s\n", r.ID, r.Layer, q(r.Field), q(c.unplace(r.Text)))
	}
	if a := c.Approvals; a != nil {
		c.encodeApprovals(w)
		for _, in := range a.Filter {
			fmt.Fprintf(w, "notify-bpf %04x %02x %02x %08x\n", in.Code, in.Jt, in.Jf, in.K)
		}
	}
}

// The hash of a compiled policy is what records compare across calls and versions: the fast
// encoding must be the same bytes as the plain one, for every kind of line.
func TestEncodingIsTheFmtEncoding(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	for _, tc := range []struct{ name, spec string }{
		{"enforce", "  mode: enforce\n"},
		{"audit", "  mode: audit\n"},
		{"syscalls and limits", "  syscalls: {deny: [ptrace, mount, kexec_load], fatal: [kexec_load]}\n  resources: {memory: 512Mi, pids: 10}\n"},
		{"network", "  isolation: {network: host-filtered}\n  network:\n    egress:\n" +
			"      - {cidr: 0.0.0.0/0, ports: [443]}\n      - {cidr: \"::/0\", ports: [443]}\n" +
			"      - {cidr: 10.1.0.0/16, ports: [\"8000-8100\"]}\n      - {cidr: 10.1.0.53, ports: [53], protocol: udp}\n" +
			"      - {domain: \"*.pypi.org\", ports: [443]}\n"},
		{"approvals", "  approvals:\n    timeout: 90s\n    rules:\n" +
			"      - name: delete-reports\n        match: {unlink: \"${WORKSPACE}/reports/**\"}\n" +
			"      - name: payments-api\n        match: {connect: \"10.20.0.0/16:443\"}\n        count: 2\n        approvers: [a, b]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(header+"spec:\n"+tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Compile(env)
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			fmtEncoding(c, &want)
			got := c.appendEncoding(nil)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("encodings differ:\n got: %.2000s\nwant: %.2000s", got, want.Bytes())
			}
			if len(c.Seccomp) == 0 || len(c.Rules) == 0 || len(c.Landlock.Paths) == 0 {
				t.Fatalf("the policy exercises too little: %d bpf, %d rules, %d paths", len(c.Seccomp), len(c.Rules), len(c.Landlock.Paths))
			}
			if tc.name == "approvals" && (c.Approvals == nil || len(c.Approvals.Filter) == 0) {
				t.Fatal("no approval filter")
			}
		})
	}
}

func TestAppendQuote(t *testing.T) {
	for _, s := range []string{"", "/usr/lib", "${WORKSPACE}/a b", "say \"hi\"", `back\slash`, "tab\there", "nul\x00", "caf\u00e9", "\xff", "~", "\x7f"} {
		if got, want := string(appendQuote([]byte("x"), s)), "x"+strconv.Quote(s); got != want {
			t.Errorf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	}
}
