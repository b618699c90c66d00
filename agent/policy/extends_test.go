package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// extends names another policy file, relative to the file that names it: its lists are the
// parent's changed by the additive form, its values the parent's where left out. A cycle, a
// chain deeper than MaxExtendsDepth, a parent that is missing, invalid or not a regular file
// are refused at the extends line.
func TestExtendsAnotherPolicyFile(t *testing.T) {
	strict := Strict().Spec
	doc := func(extends, spec string) string {
		s := header
		if extends != "" {
			s += "extends: " + extends + "\n"
		}
		return s + "spec:\n" + spec
	}
	const mode = "  mode: enforce\n"
	for _, c := range []struct {
		name  string
		files map[string]string // relative path -> text; the policy parsed is "p.yaml"
		err   string            // an error containing this, with {dir} the files' directory
		check func(t *testing.T, p *Policy, dir string)
	}{
		{name: "a parent's additions and values are the child's",
			files: map[string]string{
				"base.yaml": doc("", "  resources: {memory: 128Mi}\n  filesystem:\n    deny: {add: [/srv/base]}\n"),
				"p.yaml":    doc("base.yaml", "  filesystem:\n    deny: {add: [/srv/child]}\n"),
			},
			check: func(t *testing.T, p *Policy, dir string) {
				want := append(slices.Clone(strict.Filesystem.Deny), "/srv/base", "/srv/child")
				if !slices.Equal(p.Spec.Filesystem.Deny, want) || p.Spec.Resources.MemoryBytes != 128<<20 {
					t.Errorf("deny %v, memory %d; want strict's, the parent's and the child's entries, the parent's memory", p.Spec.Filesystem.Deny, p.Spec.Resources.MemoryBytes)
				}
				if len(p.Parents) != 1 || p.Parents[0].Path != filepath.Join(dir, "base.yaml") {
					t.Errorf("parents %+v", p.Parents)
				}
			}},
		{name: "a path is relative to the file that names it",
			files: map[string]string{
				"lib/base.yaml": doc("", "  filesystem:\n    deny: {add: [/srv/base]}\n"),
				"lib/mid.yaml":  doc("base.yaml", mode),
				"p.yaml":        doc("lib/mid.yaml", mode),
			},
			check: func(t *testing.T, p *Policy, dir string) {
				if !slices.Contains(p.Spec.Filesystem.Deny, "/srv/base") || len(p.Parents) != 2 || p.Parents[1].Path != filepath.Join(dir, "lib/base.yaml") {
					t.Errorf("deny %v, parents %+v", p.Spec.Filesystem.Deny, p.Parents)
				}
			}},
		{name: "a child removes what its parent added",
			files: map[string]string{
				"base.yaml": doc("strict", "  filesystem:\n    deny: {add: [/srv/base]}\n"),
				"p.yaml":    doc("base.yaml", "  filesystem:\n    deny: {remove: [/srv/base]}\n"),
			},
			check: func(t *testing.T, p *Policy, dir string) {
				if !slices.Equal(p.Spec.Filesystem.Deny, strict.Filesystem.Deny) {
					t.Errorf("deny %v, want strict's", p.Spec.Filesystem.Deny)
				}
			}},
		{name: "a file extending itself is a cycle",
			files: map[string]string{"p.yaml": doc("p.yaml", mode)},
			err:   "{dir}/p.yaml:5:10: extends: extends p.yaml: a cycle of policies extending one another ({dir}/p.yaml -> {dir}/p.yaml)"},
		{name: "two files extending each other are a cycle",
			files: map[string]string{"p.yaml": doc("q.yaml", mode), "q.yaml": doc("p.yaml", mode)},
			err:   "{dir}/q.yaml:5:10: extends: extends p.yaml: a cycle of policies extending one another ({dir}/p.yaml -> {dir}/q.yaml -> {dir}/p.yaml)"},
		{name: "a chain deeper than the bound is refused",
			files: chain(MaxExtendsDepth+1, doc),
			err:   fmt.Sprintf("more than %d policy files extend one another", MaxExtendsDepth)},
		{name: "a chain at the bound is read",
			files: chain(MaxExtendsDepth, doc),
			check: func(t *testing.T, p *Policy, dir string) {
				if len(p.Parents) != MaxExtendsDepth-1 {
					t.Errorf("%d parents", len(p.Parents))
				}
			}},
		{name: "a missing parent is named at the extends line",
			files: map[string]string{"p.yaml": doc("gone.yaml", mode)},
			err:   "{dir}/p.yaml:5:10: extends: extends gone.yaml: open {dir}/gone.yaml: no such file or directory"},
		{name: "an invalid parent's own error is given, at its line",
			files: map[string]string{"p.yaml": doc("base.yaml", mode), "base.yaml": doc("", "  mdoe: enforce\n")},
			err:   "{dir}/base.yaml:6:3: spec.mdoe: unknown field"},
		{name: "extends must name something",
			files: map[string]string{"p.yaml": doc(`""`, mode)},
			err:   "expected strict or a policy file's path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range c.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Load(filepath.Join(dir, "p.yaml"))
			if c.err != "" {
				want := strings.ReplaceAll(c.err, "{dir}", dir)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want one with %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, p, dir)
		})
	}
}

// chain is n files, p.yaml extending f1.yaml extending ... f(n-1).yaml.
func chain(n int, doc func(extends, spec string) string) map[string]string {
	files := map[string]string{}
	for i := range n {
		name, parent := fmt.Sprintf("f%d.yaml", i), fmt.Sprintf("f%d.yaml", i+1)
		if i == 0 {
			name = "p.yaml"
		}
		if i == n-1 {
			parent = ""
		}
		files[name] = doc(parent, "  mode: enforce\n")
	}
	return files
}

// A parent that is a FIFO is refused, not waited on: a planted pipe cannot hang the parse.
func TestExtendsRefusesAParentThatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := header + "extends: fifo.yaml\nspec:\n  mode: enforce\n"
	_, err := Parse(filepath.Join(dir, "p.yaml"), []byte(text))
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("error %v, want the FIFO refused", err)
	}
}
