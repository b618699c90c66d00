package approval

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLiteralRootIsTheNamesBeforeTheFirstWildcard(t *testing.T) {
	for glob, want := range map[string]string{
		"/ws/project/.git/**": "/ws/project/.git",
		"/ws/*.csv":           "/ws",
		"/ws/a?/b":            "/ws",
		"/ws/exact":           "/ws/exact",
		"/**":                 "/",
	} {
		if got := literalRoot(glob); got != want {
			t.Errorf("literalRoot(%q) = %q, want %q", glob, got, want)
		}
	}
}

// An object's ancestry is its own identity and each ancestor's, nearest first, each with the
// object's path below it: what a moved tree's root is found by.
func TestAncestryNamesThePathBelowEachAncestor(t *testing.T) {
	base := t.TempDir()
	os.MkdirAll(filepath.Join(base, "p2", ".git"), 0o755)
	os.WriteFile(filepath.Join(base, "p2", ".git", "HEAD"), nil, 0o644)
	d, err := unix.Open(filepath.Join(base, "p2", ".git"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	anc := ancestors(loc{dir: d, name: "HEAD", path: filepath.Join(base, "p2", ".git", "HEAD")})
	for i, want := range []struct{ path, below string }{
		{filepath.Join(base, "p2", ".git", "HEAD"), ""},
		{filepath.Join(base, "p2", ".git"), "HEAD"},
		{filepath.Join(base, "p2"), ".git/HEAD"},
		{base, "p2/.git/HEAD"},
	} {
		var st unix.Stat_t
		if err := unix.Lstat(want.path, &st); err != nil {
			t.Fatal(err)
		}
		if i >= len(anc) || anc[i].id != statID(&st) || anc[i].below != want.below {
			t.Fatalf("ancestry[%d] = %+v, want %s with %q below", i, anc[min(i, len(anc)-1)], want.path, want.below)
		}
	}
}
