package sandboxer

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/policy"
)

const cachePolicyA = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: cache-a}
spec:
  filesystem:
    read: [/usr/bin, /etc]
`

// Same length as A, one byte apart: a change a size or time check would miss.
const cachePolicyB = `apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: cache-b}
spec:
  filesystem:
    read: [/usr/bin, /etc]
`

// The parse cache's key covers every input of a parse, the file's name and its bytes: a
// change of either is parsed again, and what is served from the cache is what a parse of the
// file would give, never a copy another caller changed.
func TestPolicyCacheKeyCoversEveryInput(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write := func(path, text string) {
		t.Helper()
		st, statErr := os.Stat(path)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if statErr == nil {
			// The same mtime as before: only the bytes tell the change.
			if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(a, cachePolicyA)
	write(b, cachePolicyA)
	c := &policyCache{max: 256}
	steps := []struct {
		name   string
		before func()
		path   string
		parsed bool   // a parse, not a hit
		want   string // the policy's name
	}{
		{"first load", nil, a, true, "cache-a"},
		{"same file, same bytes", nil, a, false, "cache-a"},
		{"a caller changed its copy", nil, a, false, "cache-a"},
		{"bytes changed, same size and mtime", func() { write(a, cachePolicyB) }, a, true, "cache-b"},
		{"unchanged again", nil, a, false, "cache-b"},
		{"another name, same bytes as a file seen", func() { write(b, cachePolicyB) }, b, true, "cache-b"},
		{"changed back", func() { write(a, cachePolicyA) }, a, true, "cache-a"},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		before := c.parses
		p, err := c.load(st.path)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := c.parses - before; got != map[bool]int{true: 1}[st.parsed] {
			t.Errorf("%s: %d parses, want parsed=%v", st.name, got, st.parsed)
		}
		if p.Metadata.Name != st.want || p.File != st.path {
			t.Errorf("%s: got policy %q from %s, want %q from %s", st.name, p.Metadata.Name, p.File, st.want, st.path)
		}
		fresh, err := policy.Load(st.path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, fresh) {
			t.Errorf("%s: the cached policy differs from a fresh parse:\n%+v\n%+v", st.name, p, fresh)
		}
		// What this caller does to its copy must not reach the next one.
		p.Metadata.Name = "changed by a caller"
		p.Spec.Filesystem.Read[0] = "/"
		p.Spec.Filesystem.Read = append(p.Spec.Filesystem.Read, "/root")
	}
}

// A file that does not parse is not kept: the call fails, and the fixed file runs.
func TestPolicyCacheKeepsNoFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	c := &policyCache{max: 256}
	if err := os.WriteFile(path, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nspec: {bogus: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.load(path); err == nil {
		t.Fatal("a bad policy loaded")
	}
	if err := os.WriteFile(path, []byte(cachePolicyA), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := c.load(path)
	if err != nil || p.Metadata.Name != "cache-a" {
		t.Fatalf("fixed file: %v %v", p, err)
	}
}

// A policy that extends another file is parsed again when that parent changed, though its own
// bytes did not: the parent is an input of the parse too.
func TestPolicyCacheParsesAgainWhenAParentChanged(t *testing.T) {
	dir := t.TempDir()
	parent, child := filepath.Join(dir, "parent.yaml"), filepath.Join(dir, "child.yaml")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(parent, cachePolicyA)
	write(child, "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: child}\nextends: parent.yaml\nspec: {mode: enforce}\n")
	c := &policyCache{max: 256}
	for i, tc := range []struct {
		name   string
		parent string
		read   []string
		parses int
	}{
		{"the first load parses", "", []string{"/usr/bin", "/etc"}, 1},
		{"an unchanged chain is served from the cache", "", []string{"/usr/bin", "/etc"}, 1},
		{"a changed parent is parsed again", strings.Replace(cachePolicyA, "/etc]", "/opt]", 1), []string{"/usr/bin", "/opt"}, 2},
	} {
		if tc.parent != "" {
			write(parent, tc.parent)
		}
		p, err := c.load(child)
		if err != nil {
			t.Fatalf("%d %s: %v", i, tc.name, err)
		}
		if !reflect.DeepEqual(p.Spec.Filesystem.Read, tc.read) || c.parses != tc.parses {
			t.Errorf("%s: read %v after %d parses, want %v after %d", tc.name, p.Spec.Filesystem.Read, c.parses, tc.read, tc.parses)
		}
	}
}
