package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse: whatever bytes a policy file holds, Parse returns a policy or Errors, never
// panics; every error is located (file:line:col, line and column from 1, inside the file)
// and says something; and the same bytes parse to the same policy twice (no state leaks from
// one parse to the next, the strict base included).
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		string(strictYAML),
		header + "spec: {}\n",
		header + "spec:\n  mode: audit\n  isolation: {network: host-filtered, capabilities: []}\n" +
			"  resources: {memory: 1Gi, pids: 10, cpus: 500m, wallTime: 90s, outputBytes: 1000, tmpSize: 2M, tmpInodes: 64, disk: 3Gi, inodes: 500}\n" +
			"  filesystem: {read: [\"${WORKSPACE}/src\"], write: [], exec: [\"/opt/tool\"], deny: [], allowSpecialFiles: true}\n" +
			"  network:\n    egress:\n      - {cidr: 10.0.0.0/8, ports: [443, \"8000-8100\"]}\n      - {cidr: \"2001:db8::1\", ports: [53], protocol: udp}\n",
		header + "spec:\n  syscalls: {allow: [read, write], defaultAction: kill}\n",
		header + "spec:\n  resources: {cpus: 1.5, memory: 99999999999999999999Gi, pids: -1}\n",
		header + "spec:\n  network:\n    domains:\n      - {name: \"*.example.com\", ports: [443], allowPrivate: true}\n",
		header + "spec:\n  approvals:\n    rules:\n      - {action: unlink, path: \"${WORKSPACE}/**\", approver: terminal}\n",
		header + "spec:\n  credentials:\n    - {name: GH, env: GH_TOKEN, from: {env: X}}\n",
		header + "spec:\n  filesystem: &fs {read: [/usr]}\n  output: *fs\n",
		header + "spec:\n  <<: {mode: audit}\n",
		header + "spec:\n  filesystem:\n    read: [&a /usr, *a, *a]\n",
		"a: &a [x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
		"apiVersion: berm.dev/v1alpha1\n---\nkind: ToolPolicy\n",
		"",
		"\xef\xbb\xbf" + header,
		"key: \x01\n",
		"key: \xff\xfe\n",
		"\tspec: 1\n",
		"- [" + strings.Repeat("[", 100),
		"!!binary AAAA",
		"? [a]\n: b\n",
		header + "spec: {mode: enforce, mode: audit}\n",
		header + "spec:\n  resources:\n    wallTime: 99999999999h\n",
	} {
		f.Add([]byte(seed))
	}
	root := f.TempDir()
	for _, d := range []string{"ws", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	env := CompileEnv{Workspace: filepath.Join(root, "ws"), Tmp: filepath.Join(root, "tmp"), LandlockABI: 6, MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.yaml"
		p, err := Parse(name, data)
		if err != nil {
			if p != nil {
				t.Fatalf("a policy and an error: %v", err)
			}
			checkErrors(t, name, data, err)
			return
		}
		p2, err := Parse(name, data)
		if err != nil {
			t.Fatalf("parsed once, then failed: %v", err)
		}
		if !reflect.DeepEqual(p.Spec, p2.Spec) || !reflect.DeepEqual(p.Metadata, p2.Metadata) {
			t.Fatalf("the same bytes parsed to two policies:\n%+v\n%+v", p.Spec, p2.Spec)
		}
		// What parses compiles to a policy or to errors of this file, never a panic, and to
		// the same hash twice.
		c, err := p.Compile(env)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("compile error %T %q is not a list of errors", err, err)
			}
			for _, e := range es {
				if e.File != name || e.Msg == "" || e.Line < 0 || (e.Line > 0 && e.Col < 1) {
					t.Fatalf("compile error not of this file: %s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
				}
			}
			return
		}
		c2, err := p2.Compile(env)
		if err != nil {
			t.Fatalf("compiled once, then failed: %v", err)
		}
		if c.Hash() != c2.Hash() {
			t.Fatalf("one policy, two hashes: %s %s", c.Hash(), c2.Hash())
		}
	})
}

// checkErrors is the contract of a policy's errors: Errors, each at file:line:col of the file.
func checkErrors(t *testing.T, name string, data []byte, err error) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		t.Fatalf("error %T %q is not a list of located errors", err, err)
	}
	lines := yamlLines(data)
	for _, e := range es {
		if e.File != name || e.Line < 1 || e.Col < 1 || e.Line > lines+1 {
			t.Fatalf("error not located in the file of %d lines: %s:%d:%d: %s", lines, e.File, e.Line, e.Col, e.Msg)
		}
		if e.Msg == "" {
			t.Fatalf("error without a message at %d:%d", e.Line, e.Col)
		}
		if want := fmt.Sprintf("%s:%d:%d: ", name, e.Line, e.Col); !strings.HasPrefix(e.Error(), want) {
			t.Fatalf("error %q does not start with %q", e.Error(), want)
		}
		if !utf8.ValidString(e.Error()) && utf8.Valid(data) {
			t.Fatalf("error %q is not UTF-8 though the file is", e.Error())
		}
	}
}

// yamlLines bounds the lines YAML counts in data: \n, \r, NEL, LS and PS each break a line
// (\r\n counts twice here: a bound, not the count).
func yamlLines(data []byte) int {
	n := 1
	for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		n += strings.Count(string(data), br)
	}
	return n
}
