package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodRule = `rules:
  - id: r1
    title: t
    description: d
    severity: high
    surface: isolation
    technique: [T1611]
    condition: syscall.name == "mount"
    output: "mount ${syscall.path}"
    tests:
      match: [{syscall: {name: mount, path: /mnt}}]
      nomatch: [{syscall: {name: unlink}}]
`

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each broken file yields an issue at the right file:line:column naming the rule and the cause.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		want []string // substrings of the issue list, in order
	}{
		{"unknown field", strings.Replace(goodRule, "    output:", "    colour: red\n    output:", 1),
			[]string{`x.yaml:9:5: rule "r1": rule: unknown field "colour"`}},
		{"undeclared reference", strings.Replace(goodRule, `syscall.name == "mount"`, `sycall.name == "mount"`, 1),
			[]string{`x.yaml:8:16: rule "r1": condition: ERROR: <input>:1:1: undeclared reference to 'sycall'`, "| sycall.name"}},
		{"type error", strings.Replace(goodRule, `syscall.name == "mount"`, `syscall.name == 3`, 1),
			[]string{`x.yaml:8:29: rule "r1": condition: ERROR: <input>:1:14: found no matching overload for '_==_' applied to '(string, int)'`}},
		{"not bool", strings.Replace(goodRule, `syscall.name == "mount"`, `syscall.name`, 1),
			[]string{`x.yaml:8:16: rule "r1": condition: must be bool, is string`}},
		{"bad output expression", strings.Replace(goodRule, `${syscall.path}`, `${syscall.pth}`, 1),
			[]string{`x.yaml:9:29: rule "r1": output: ERROR: <input>:1:8: undefined field 'pth'`}},
		{"bad severity", strings.Replace(goodRule, "severity: high", "severity: hgh", 1),
			[]string{`x.yaml:5:15: rule "r1": severity: "hgh" is not one of`}},
		{"bad technique", strings.Replace(goodRule, "[T1611]", "[TA0004]", 1),
			[]string{`x.yaml:7:17: rule "r1": technique: "TA0004" is not a MITRE ATT&CK technique id`}},
		{"missing tests", strings.Replace(goodRule, "      nomatch: [{syscall: {name: unlink}}]\n", "", 1),
			[]string{`rule "r1": tests: needs at least one case under nomatch`}},
		{"bad test event", strings.Replace(goodRule, "{name: unlink}", "{name: unlink, pth: x}", 1),
			[]string{`x.yaml:12:17: rule "r1": test event: json: unknown field "pth"`}},
		{"missing field", strings.Replace(goodRule, "    title: t\n", "", 1),
			[]string{`x.yaml:2:5: rule "r1": missing field "title"`}},
		{"duplicate id", goodRule + strings.TrimPrefix(goodRule, "rules:\n"),
			[]string{`rule "r1": duplicate rule id (first defined at`}},
		{"kind mismatch", strings.Replace(goodRule, "    condition:", "    kind: exec\n    condition:", 1),
			[]string{`rule "r1": kind: the condition reads the syscall part, but the rule is only evaluated on [exec]`}},
		{"no kind", strings.Replace(goodRule, `syscall.name == "mount"`, `proc.uid == 0`, 1),
			[]string{`rule "r1": condition reads no event part`}},
		{"unknown syscall", strings.Replace(goodRule, `syscall.name == "mount"`, `syscall.name == "mout"`, 1),
			[]string{`rule "r1": condition: unknown syscall "mout"`}},
		{"macro cycle", "macros:\n  a: b\n  b: a\n" + goodRule,
			[]string{`macro "a": cycle a -> b -> a`}},
		{"folded condition position", strings.Replace(goodRule, `    condition: syscall.name == "mount"`, "    condition: >\n      syscall.name == \"mount\" &&\n        file.write == 3", 1),
			[]string{`x.yaml:10:20: rule "r1": condition: ERROR: <input>:2:14: found no matching overload for '_==_' applied to '(bool, int)'`}},
		{"yaml syntax", "rules: [\n", []string{`x.yaml:1:1: yaml: line 1:`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "x.yaml", tc.file)
			_, err := LoadFiles(p)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("want a *LoadError, got %v", err)
			}
			got := err.Error()
			for _, w := range tc.want {
				i := strings.Index(got, w)
				if i < 0 {
					t.Fatalf("issues:\n%s\nwant %q", got, w)
				}
				got = got[i+len(w):]
			}
		})
	}
}

// Lists and macros of one file are usable from another file of the same load.
func TestListsAndMacrosAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", "lists:\n  mounts: [mount, umount2]\nmacros:\n  is_mount: syscall.name in mounts\n  tool_mount: is_mount && proc.uid != 12345\n")
	writeFile(t, dir, "b.yaml", strings.Replace(goodRule, `syscall.name == "mount"`, `tool_mount`, 1))
	set, err := LoadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("r1")
	if got := strings.Join(r.Syscalls, ","); got != "mount,umount2" {
		t.Errorf("syscall index through macros and lists: %q", got)
	}
	for _, res := range set.RunTests() {
		if res.Failed() {
			t.Error(res)
		}
	}
}

func TestShippedLintAndTestCLI(t *testing.T) {
	var out, errOut strings.Builder
	if code := LintMain([]string{"--shipped"}, &out, &errOut); code != 0 {
		t.Fatalf("lint --shipped: %d\n%s", code, errOut.String())
	}
	out.Reset()
	if code := TestMain([]string{"ruleset"}, &out, &errOut); code != 0 {
		t.Fatalf("test ruleset: %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "0 failed") {
		t.Errorf("summary: %s", out.String())
	}
	if code := LintMain(nil, &out, &errOut); code != 2 {
		t.Errorf("lint without paths: %d, want 2", code)
	}
	// A rule whose match case does not match fails `test` but passes `lint`.
	p := writeFile(t, t.TempDir(), "wrong.yaml", strings.Replace(goodRule, "{name: mount, path: /mnt}", "{name: umount2, path: /mnt}", 1))
	out.Reset()
	if code := LintMain([]string{p}, &out, &errOut); code != 0 {
		t.Errorf("lint wrong.yaml: %d", code)
	}
	out.Reset()
	if code := TestMain([]string{p}, &out, &errOut); code != 1 || !strings.Contains(out.String(), `FAIL `+p+`:11: rule "r1": match: no alert`) {
		t.Errorf("test wrong.yaml: %d\n%s", code, out.String())
	}
}
