package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// linkTree builds a tree with every kind of path resolution meets: absolute and relative
// links, links to links, "..", a loop, a dangling link, a file used as a directory.
func linkTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib/x", "a/b/c", "ws/sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/tool"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"bin":          "usr/bin",
		"lib":          filepath.Join(root, "usr/lib"),
		"a/b/up":       "../..",
		"a/b/c/deep":   "../../../bin",
		"chain1":       "chain2",
		"chain2":       "lib/x",
		"loop1":        "loop2",
		"loop2":        "loop1",
		"dangling":     "nowhere/at/all",
		"ws/sub/out":   "../../usr",
		"ws/self":      ".",
		"tool-as-link": "usr/bin/tool",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFSReadsEvalSymlinksMatchesFilepath(t *testing.T) {
	root := linkTree(t)
	for _, p := range []string{
		"", "/", "bin", "bin/tool", "lib", "lib/x", "a/b/up", "a/b/up/bin", "a/b/c/deep/tool",
		"chain1", "chain1/..", "loop1", "dangling", "ws/sub/out/bin", "ws/self/self/sub",
		"tool-as-link", "tool-as-link/x", "usr/bin/tool/x", "missing", "missing/x", "a/./b//c/../c",
		"a/b/c/../../..", "bin/../lib",
	} {
		full := root + "/" + p
		if p == "/" {
			full = "/"
		}
		want, wantErr := filepath.EvalSymlinks(full)
		var r FSReads
		got, err := r.EvalSymlinks(full)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("%s: got %q, %v; filepath.EvalSymlinks says %q, %v", p, got, err, want, wantErr)
			continue
		}
		if wantErr != nil {
			if err.Error() != wantErr.Error() || errors.Is(err, fs.ErrNotExist) != errors.Is(wantErr, fs.ErrNotExist) {
				t.Errorf("%s: error %q, filepath.EvalSymlinks's %q", p, err, wantErr)
			}
		}
		if !r.Unchanged() {
			t.Errorf("%s: reads changed with nothing changed", p)
		}
	}
}

// TestFSReadsUnchanged: every change that could change a resolution is seen.
func TestFSReadsUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		read   func(r *FSReads, root string)
		change func(t *testing.T, root string)
	}{
		{"symlink retargeted", func(r *FSReads, root string) { _, _ = r.EvalSymlinks(root + "/bin/tool") },
			func(t *testing.T, root string) { relink(t, root+"/bin", "lib") }},
		{"symlinks swapped (rename over)", func(r *FSReads, root string) { _, _ = r.EvalSymlinks(root + "/chain1") },
			func(t *testing.T, root string) {
				mustDo(t, os.Symlink("bin", root+"/chain1.new"))
				mustDo(t, os.Rename(root+"/chain1.new", root+"/chain1"))
			}},
		{"directory replaced by a symlink", func(r *FSReads, root string) { _, _ = r.EvalSymlinks(root + "/a/b/c") },
			func(t *testing.T, root string) {
				mustDo(t, os.RemoveAll(root+"/a/b/c"))
				mustDo(t, os.Symlink("/", root+"/a/b/c"))
			}},
		{"missing path created", func(r *FSReads, root string) { _, _ = r.EvalSymlinks(root + "/missing") },
			func(t *testing.T, root string) { mustDo(t, os.Mkdir(root+"/missing", 0o755)) }},
		{"dangling link's target created", func(r *FSReads, root string) { _, _ = r.EvalSymlinks(root + "/dangling") },
			func(t *testing.T, root string) { mustDo(t, os.MkdirAll(root+"/nowhere/at/all", 0o755)) }},
		{"file replaced by a directory", func(r *FSReads, root string) { _, _ = r.IsDir(root + "/usr/bin/tool") },
			func(t *testing.T, root string) {
				mustDo(t, os.Remove(root+"/usr/bin/tool"))
				mustDo(t, os.Mkdir(root+"/usr/bin/tool", 0o755))
			}},
		{"listed directory gains an entry", func(r *FSReads, root string) { _, _ = r.ReadDir(root + "/usr") },
			func(t *testing.T, root string) { mustDo(t, os.Mkdir(root+"/usr/share", 0o755)) }},
		{"listed entry becomes a symlink", func(r *FSReads, root string) { _, _ = r.ReadDir(root + "/usr") },
			func(t *testing.T, root string) {
				mustDo(t, os.RemoveAll(root+"/usr/lib"))
				mustDo(t, os.Symlink("bin", root+"/usr/lib"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := linkTree(t)
			var r FSReads
			tc.read(&r, root)
			if r.Len() == 0 {
				t.Fatal("nothing recorded")
			}
			if !r.Unchanged() {
				t.Fatal("changed before the change")
			}
			tc.change(t, root)
			if r.Unchanged() {
				t.Error("the change was not seen")
			}
		})
	}
}

func TestFSReadsRelativeNeverUnchanged(t *testing.T) {
	var r FSReads
	_, _ = r.EvalSymlinks(".")
	_, _ = r.EvalSymlinks("x/y")
	if r.Unchanged() {
		t.Error("facts of relative paths (the working directory's) were reported unchanged")
	}
}

func relink(t *testing.T, path, target string) {
	t.Helper()
	mustDo(t, os.Remove(path))
	mustDo(t, os.Symlink(target, path))
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
