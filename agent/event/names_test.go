package event

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// walkRepo calls fn for every file of the repository with one of the extensions, skipping
// .git, bin and testdata.
func walkRepo(t *testing.T, exts []string, fn func(path string, src []byte)) {
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		for _, e := range exts {
			if strings.HasSuffix(path, e) {
				src, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				fn(path, src)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// One name per layer and surface (names.go): a denial or alert built with a literal layer or
// surface name is a second spelling waiting to drift.
func TestLayersAndSurfacesNamedByConstants(t *testing.T) {
	walkRepo(t, []string{".go"}, func(path string, src []byte) {
		if strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "/agent/event/names.go") {
			return
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if sel, ok := cl.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reload" {
				return true // Reload.Surface is the part of the policy reloaded (network), not a surface
			}
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := kv.Key.(*ast.Ident)
				if !ok || key.Name != "Layer" && key.Name != "Surface" {
					continue
				}
				if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					t.Errorf("%s: %s: %s %s: use the names.go constant", path, fset.Position(lit.Pos()), key.Name, lit.Value)
				}
			}
			return true
		})
	})
}

// The network layer had three spellings (bpf-cgroup-sock, bpf-cgroup, cgroup-sock): only
// LayerCgroupSock's may appear in code, comments and documentation.
func TestOneNameForTheNetworkLayer(t *testing.T) {
	variant := regexp.MustCompile(`[a-z_-]*cgroup[-_]sock[a-z_-]*|bpf-cgroup[a-z_-]*`)
	walkRepo(t, []string{".go", ".md", ".yaml", ".sql", ".cel"}, func(path string, src []byte) {
		if strings.HasSuffix(path, "/agent/event/names_test.go") {
			return // the variants, named above
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, m := range variant.FindAllString(line, -1) {
				if m != LayerCgroupSock && m != strconv.Quote(LayerCgroupSock) {
					t.Errorf("%s:%d: %q: the network layer is %s", path, i+1, m, LayerCgroupSock)
				}
			}
		}
	})
}
