package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The judge's names are filepath.EvalSymlinks's where it resolves (the directory's for a name
// not there), whatever symlinks the tool planted.
func TestJudgeResolvesAsEvalSymlinksDoes(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "real/sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "real/sub/f"), nil, 0o644))
	must(os.Symlink("real", filepath.Join(dir, "rel")))
	must(os.Symlink(filepath.Join(dir, "real/sub"), filepath.Join(dir, "abs")))
	must(os.Symlink("../real/sub/f", filepath.Join(dir, "real/flink")))
	must(os.Symlink("rel/sub", filepath.Join(dir, "twice")))
	for i := 0; i < 60; i++ {
		must(os.Symlink(fmt.Sprintf("l%d", i+1), filepath.Join(dir, fmt.Sprintf("l%d", i))))
	}
	must(os.Mkdir(filepath.Join(dir, "l60"), 0o755))
	for _, tc := range []struct{ path, want string }{
		{"rel/sub/f", "real/sub/f"},
		{"abs/f", "real/sub/f"},
		{"real/flink", "real/sub/f"},
		{"twice/f", "real/sub/f"},
		{"twice/missing", "real/sub/missing"},
		{"rel/sub/../sub/f", "real/sub/f"},
		{"l0/f", "l0/f"},   // deeper than the kernel follows: named as given
		{"l55/f", "l60/f"}, // within it: resolved
	} {
		t.Run(tc.path, func(t *testing.T) {
			var r resolver
			if got := r.canonical(filepath.Join(dir, tc.path)); got != filepath.Join(dir, tc.want) {
				t.Errorf("canonical(%s) = %s, want %s", tc.path, got, filepath.Join(dir, tc.want))
			}
		})
	}
}

// A flood of distinct names through a symlink chain costs one resolution of the chain and
// one lstat a name; the whole call's reads of the host file system are bounded.
func TestJudgeResolvingAFloodCostsBoundedWork(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if err := os.Symlink(fmt.Sprintf("l%d", i+1), filepath.Join(dir, fmt.Sprintf("l%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var r resolver
	const names = 10000
	for i := 0; i < names; i++ {
		r.canonical(filepath.Join(dir, "l0", fmt.Sprint("f", i)))
	}
	if r.spent > 200+names {
		t.Errorf("%d distinct names through a 60-link chain took %d reads of the file system", names, r.spent)
	}
	r.spent = resolveBudget
	p := filepath.Join(dir, "l50", "x")
	if got := r.canonical(p); got != p {
		t.Errorf("past the budget, %s is named %s", p, got)
	}
	if r.spent != resolveBudget {
		t.Errorf("past the budget, %d more reads", r.spent-resolveBudget)
	}
}

// The judge's cost per failed open through a 60-link chain, each with a name of its own (the
// flood of issue 23; filepath.EvalSymlinks, as before, took ~500 us an event here).
func BenchmarkJudgeResolveSymlinkChainFlood(b *testing.B) {
	dir, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		if err := os.Symlink(fmt.Sprintf("l%d", i+1), filepath.Join(dir, fmt.Sprintf("l%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	var r resolver
	for i := 0; b.Loop(); i++ {
		r.canonical(filepath.Join(dir, "l0", fmt.Sprint("f", i)))
	}
}
