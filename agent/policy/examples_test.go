package policy

import (
	"path/filepath"
	"slices"
	"testing"
)

// Every example policy parses, compiles for a call, and drops of strict only what it says it
// opens (berm policy check's warnings).
func TestExamplePoliciesCompileAndDropOnlyWhatTheyOpen(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	want := map[string][]string{
		"python-tool.yaml":         nil,
		"shell-tool.yaml":          nil,
		"approve-deletions.yaml":   nil,
		"brokered-credential.yaml": nil,
		"http-client.yaml":         {"spec.isolation.network is host-filtered (strict: none, a network namespace of the call's own)"},
	}
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) != len(want) {
		t.Fatalf("examples: %v %v, want the %d of this test", files, err, len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if errs := Check(f); len(errs) > 0 {
				t.Fatalf("berm policy check: %v", errs)
			}
			p, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Compile(env)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if c.Mode != Enforce || len(c.Seccomp) == 0 {
				t.Errorf("compiled %s: mode %s, %d filter instructions", f, c.Mode, len(c.Seccomp))
			}
			if got := p.Dropped(); !slices.Equal(got, want[filepath.Base(f)]) {
				t.Errorf("drops %q, want %q", got, want[filepath.Base(f)])
			}
		})
	}
}
