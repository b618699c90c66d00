package sandboxer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// cacheSpec is a call whose policy grants read on root/tool (a symlink the test moves) and on
// root/data, whose deny entry is carved out of a listed directory.
func cacheSpec(t *testing.T, root string) *Spec {
	t.Helper()
	text := fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: cache}
spec:
  filesystem:
    read: [/usr/lib, %[1]s/tool, %[1]s/data]
    write: ["${WORKSPACE}", "${TMP}"]
    exec: [/usr/bin]
    deny: [%[1]s/data/secret]
`, root)
	p, err := policy.Parse("cache.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return &Spec{CallID: "c", Tool: "t", Tenant: "x", Argv: []string{"/bin/true"}, Workspace: t.TempDir(), Policy: p,
		Limits: event.Limits{MemoryBytes: 1 << 30, Pids: 10, CPUs: 1, WallTime: 1e9, OutputBytes: 1 << 20, TmpBytes: 1 << 20}}
}

// cacheTree is outside /tmp: the policy's deny would carve it out of the ${TMP} grant, and
// every path of the tree would be granted by the carve of /tmp itself.
func cacheTree(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("/var/tmp", "berm-compilecache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	for _, d := range []string{"a", "b", "data/secret", "data/open"} {
		mustDo(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	mustDo(t, os.Symlink("a", filepath.Join(root, "tool")))
	return root
}

func landlockPaths(env *callEnv) []string {
	var out []string
	for _, r := range env.compiled.Landlock.Paths {
		out = append(out, r.Path)
	}
	return out
}

func bindOf(env *callEnv, path string) (sandboxinit.Bind, bool) {
	for _, b := range env.init.Root.Binds {
		if b.Path == path {
			return b, true
		}
	}
	return sandboxinit.Bind{}, false
}

// TestCompileCacheNeverStale: a call after a change of what its policy's paths resolve to is
// compiled for the new resolution, whatever the earlier call's compile said; one after no
// change reuses the compile.
func TestCompileCacheNeverStale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, root string)
		check  func(t *testing.T, root string, env *callEnv)
	}{
		{"symlink swapped for one to another tree", func(t *testing.T, root string) {
			mustDo(t, os.Symlink("b", filepath.Join(root, "tool.new")))
			mustDo(t, os.Rename(filepath.Join(root, "tool.new"), filepath.Join(root, "tool")))
		}, func(t *testing.T, root string, env *callEnv) {
			got := landlockPaths(env)
			if !slices.Contains(got, filepath.Join(root, "b")) || slices.Contains(got, filepath.Join(root, "a")) {
				t.Errorf("landlock paths %v: want %s/b, not %s/a", got, root, root)
			}
			if b, ok := bindOf(env, filepath.Join(root, "tool")); !ok || b.Link != "b" {
				t.Errorf("root plan's bind of tool %+v: want the link to b", b)
			}
			if !slices.Contains(env.judge.Roots, filepath.Join(root, "b")) {
				t.Errorf("judge roots %v: want %s/b", env.judge.Roots, root)
			}
		}},
		{"symlink replaced by a directory", func(t *testing.T, root string) {
			mustDo(t, os.Remove(filepath.Join(root, "tool")))
			mustDo(t, os.Mkdir(filepath.Join(root, "tool"), 0o755))
		}, func(t *testing.T, root string, env *callEnv) {
			if got := landlockPaths(env); !slices.Contains(got, filepath.Join(root, "tool")) {
				t.Errorf("landlock paths %v: want %s/tool itself", got, root)
			}
			if b, ok := bindOf(env, filepath.Join(root, "tool")); !ok || b.Link != "" {
				t.Errorf("root plan's bind of tool %+v: want a directory", b)
			}
		}},
		{"entry appears beside a carved deny", func(t *testing.T, root string) {
			mustDo(t, os.Mkdir(filepath.Join(root, "data/new"), 0o755))
		}, func(t *testing.T, root string, env *callEnv) {
			if got := landlockPaths(env); !slices.Contains(got, filepath.Join(root, "data/new")) {
				t.Errorf("landlock paths %v: want the new %s/data/new granted beside the denied secret", got, root)
			}
		}},
		{"carved entry becomes a symlink to the denied tree", func(t *testing.T, root string) {
			mustDo(t, os.Remove(filepath.Join(root, "data/open")))
			mustDo(t, os.Symlink("secret", filepath.Join(root, "data/open")))
		}, func(t *testing.T, root string, env *callEnv) {
			if got := landlockPaths(env); slices.Contains(got, filepath.Join(root, "data/open")) {
				t.Errorf("landlock paths %v: a symlink beside the deny (%s/data/open -> secret) is still granted", got, root)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := cacheTree(t)
			spec := cacheSpec(t, root)
			first, err := compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			hits := cacheHits()
			again, err := compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			if cacheHits() != hits+1 || again.compiled != first.compiled {
				t.Fatal("an unchanged call's compile was not reused")
			}
			tc.change(t, root)
			changed, err := compile(spec)
			if err != nil {
				t.Fatal(err)
			}
			if changed.compiled == first.compiled {
				t.Fatal("the compile from before the change was reused")
			}
			tc.check(t, root, changed)
		})
	}
}

// TestCompileCacheKey: a call with another workspace or another policy text is another
// compile.
func TestCompileCacheKey(t *testing.T) {
	root := cacheTree(t)
	spec := cacheSpec(t, root)
	first, err := compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	other := *spec
	other.Workspace = t.TempDir()
	env, err := compile(&other)
	if err != nil {
		t.Fatal(err)
	}
	if env.compiled == first.compiled || env.init.Landlock.Paths[0].Path == "" {
		t.Error("another workspace reused the compile")
	}
	other = *spec
	other.Policy = spec.Policy.Clone()
	other.Policy.Spec.Filesystem.Exec = append(other.Policy.Spec.Filesystem.Exec, "/usr/sbin")
	env, err = compile(&other)
	if err != nil {
		t.Fatal(err)
	}
	if env.compiled == first.compiled || !slices.Contains(landlockPaths(env), "/usr/sbin") {
		t.Error("another policy reused the compile")
	}
}

// TestCompileCacheConcurrent: calls sharing a compile at once (go test -race).
func TestCompileCacheConcurrent(t *testing.T) {
	root := cacheTree(t)
	spec := cacheSpec(t, root)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				s := *spec
				if _, err := compile(&s); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func cacheHits() int {
	policyCompiles.mu.Lock()
	defer policyCompiles.mu.Unlock()
	return policyCompiles.hits
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
