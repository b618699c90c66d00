package lsm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/policy/landlock"
)

func TestRightsOf(t *testing.T) {
	write := landlock.WriteFile | landlock.RemoveDir | landlock.RemoveFile | landlock.MakeDir | landlock.MakeReg |
		landlock.Truncate | landlock.Refer
	for _, c := range []struct {
		name   string
		access uint64
		want   Rights
	}{
		{"nothing", 0, 0},
		{"read grant", landlock.ReadFile | landlock.ReadDir, Read},
		{"read grant on a file", landlock.ReadFile, Read},
		{"listing alone is no read grant", landlock.ReadDir, 0},
		{"exec grant", landlock.Execute | landlock.ReadFile | landlock.ReadDir, Read | Exec},
		{"write grant", landlock.ReadFile | landlock.ReadDir | write, Read | Write | Remove},
		{"write grant on a file", landlock.ReadFile | landlock.WriteFile | landlock.Truncate, Read | Write},
		{"making entries alone is no write grant", landlock.MakeReg | landlock.MakeDir, 0},
		{"removing dirs alone is no remove grant", landlock.RemoveDir, 0},
		{"execute without read", landlock.Execute, Exec},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := RightsOf(c.access); got != c.want {
				t.Errorf("RightsOf(%#x) = %v, want %v", c.access, got, c.want)
			}
		})
	}
}

func TestFromLandlock(t *testing.T) {
	rd := landlock.ReadFile | landlock.ReadDir
	ex := landlock.Execute | rd
	wr := rd | landlock.WriteFile | landlock.RemoveFile | landlock.RemoveDir | landlock.MakeReg
	for _, c := range []struct {
		name  string
		paths []landlock.PathRule
		base  uint32
		want  []Rule
	}{
		{"empty", nil, 0, nil},
		{"independent trees keep their rights", []landlock.PathRule{
			{Path: "/bin", Access: ex}, {Path: "/etc", Access: rd}, {Path: "/work", Access: wr},
		}, 0, []Rule{
			{Path: "/bin", Rights: Read | Exec, ID: 1},
			{Path: "/etc", Rights: Read, ID: 2},
			{Path: "/work", Rights: Read | Write | Remove, ID: 3},
		}},
		{"a nested rule carries its ancestors' rights", []landlock.PathRule{
			{Path: "/usr", Access: rd}, {Path: "/usr/bin", Access: ex}, {Path: "/usr/bin/tool", Access: landlock.WriteFile},
		}, 0, []Rule{
			{Path: "/usr", Rights: Read, ID: 1},
			{Path: "/usr/bin", Rights: Read | Exec, ID: 2},
			{Path: "/usr/bin/tool", Rights: Read | Exec | Write, ID: 3},
		}},
		{"a sibling with a common prefix is no ancestor", []landlock.PathRule{
			{Path: "/srv/a", Access: wr}, {Path: "/srv/ab", Access: rd},
		}, 0, []Rule{
			{Path: "/srv/a", Rights: Read | Write | Remove, ID: 1},
			{Path: "/srv/ab", Rights: Read, ID: 2},
		}},
		{"the root is everyone's ancestor", []landlock.PathRule{
			{Path: "/", Access: rd}, {Path: "/tmp", Access: wr},
		}, 0, []Rule{
			{Path: "/", Rights: Read, ID: 1},
			{Path: "/tmp", Rights: Read | Write | Remove, ID: 2},
		}},
		{"ids continue the policy's numbering", []landlock.PathRule{
			{Path: "/etc", Access: rd}, {Path: "/dev/null", Access: landlock.ReadFile | landlock.WriteFile},
		}, 40, []Rule{
			{Path: "/etc", Rights: Read, ID: 41},
			{Path: "/dev/null", Rights: Read | Write, ID: 42},
		}},
		{"rules that grant nothing the LSM knows are left out", []landlock.PathRule{
			{Path: "/a", Access: landlock.MakeSock}, {Path: "/b", Access: rd},
		}, 0, []Rule{
			{Path: "/b", Rights: Read, ID: 2},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := FromLandlock(landlock.Ruleset{HandledFS: landlock.FSRights(landlock.MaxABI), Paths: c.paths}, c.base)
			if !slices.Equal(got, c.want) {
				t.Errorf("FromLandlock:\n got  %v\n want %v", got, c.want)
			}
		})
	}
}

// The rules come from the same compiled policy the Landlock layer applies: a compiled
// policy's grants, deny carve-outs included, must map to the rights it means.
func TestFromCompiledPolicy(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"etc/private", "etc/sub", "ws", "tmp", "tools"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "etc/conf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := compile(t, base, "enforce")
	got := map[string]Rights{}
	for _, r := range FromLandlock(c.Landlock, uint32(len(c.Rules))) {
		got[r.Path] = r.Rights
		if r.ID <= uint32(len(c.Rules)) {
			t.Errorf("rule %s has id %d, inside the policy's other rules (1..%d)", r.Path, r.ID, len(c.Rules))
		}
	}
	bin, err := filepath.EvalSymlinks("/bin")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]Rights{
		base + "/etc/conf":    Read,
		base + "/etc/sub":     Read,
		base + "/ws":          Read | Write | Remove,
		base + "/tmp":         Read | Write | Remove,
		base + "/tools":       Read | Exec,
		bin:                   Read | Exec,
		base + "/etc":         0, // carved: the deny below it removes the grant on the directory
		base + "/etc/private": 0,
	} {
		if got[path] != want {
			t.Errorf("%s: rights %v, want %v", path, got[path], want)
		}
	}
}

// compile compiles the test policy over the tree at base, as the launcher does for a call.
func compile(t *testing.T, base, mode string) *policy.Compiled {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	text := `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata:
  name: lsm-test
spec:
  mode: ` + mode + `
  filesystem:
    read: [` + base + `/etc]
    write: ["${WORKSPACE}", "${TMP}"]
    exec: [/bin, ` + base + `/tools, ` + exe + `]
    deny: [` + base + `/etc/private]
`
	p, err := policy.Parse("lsm-test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	c, err := p.Compile(policy.CompileEnv{Workspace: base + "/ws", Tmp: base + "/tmp"})
	if err != nil {
		t.Fatalf("compile policy: %v", err)
	}
	return c
}
