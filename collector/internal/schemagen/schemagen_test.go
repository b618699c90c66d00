package schemagen

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scratch copies what the generator reads (agent/event and the migrations) to a temporary
// module root and applies edit to agent/event/event.go there.
func scratch(t *testing.T, edit func(src string) string) string {
	t.Helper()
	root := t.TempDir()
	for _, dir := range []string{"agent/event", "collector/schema/legacy", "collector/schema/modern"} {
		ents, err := os.ReadDir(filepath.Join("..", "..", "..", dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("..", "..", "..", dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == "event.go" {
				b = []byte(edit(string(b)))
			}
			if err := os.WriteFile(filepath.Join(root, dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func replace(t *testing.T, old, new string) func(string) string {
	return func(src string) string {
		if !strings.Contains(src, old) {
			t.Fatalf("%q not in event.go", old)
		}
		return strings.Replace(src, old, new, 1)
	}
}

// Adding a member to an event is one edit: the generator gives the scanner its reader, the
// rows its column, a new migration for both dialects and its line in FIELDS.md.
func TestAddingAFieldIsOneEdit(t *testing.T) {
	root := scratch(t, func(src string) string {
		src = replace(t, "\tPhase string `json:\"phase,omitempty\" ch:\",lc\"`\n",
			"\tPhase string `json:\"phase,omitempty\" ch:\",lc\"`\n\t// Sandbox names the sandbox flavour.\n\tSandbox string `json:\"sandbox,omitempty\" ch:\",lc\"`\n")(src)
		return replace(t, "\t// PathTruncated is set",
			"\tInode uint64 `json:\"inode,omitempty\"` // inode of the opened file\n\t// PathTruncated is set")(src)
	})
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	_, last, err := existingColumns(filepath.Join(root, "collector/schema/legacy"))
	if err != nil {
		t.Fatal(err)
	}
	mig := fmt.Sprintf("%04d_add_sandbox.sql", last+1)
	for _, want := range []struct{ file, text string }{
		{"collector/scan_gen.go", "if sc.has(`,\"sandbox\":`) {\n\t\tx.Sandbox = sc.nonEmpty()"},
		{"collector/scan_gen.go", "if sc.has(`,\"inode\":`) {\n\t\tx.Inode = sc.uint64()\n\t\tsc.check(x.Inode != 0)"},
		{"collector/rows_gen.go", "sandbox:   e.Sandbox,"},
		{"collector/rows_gen.go", `cols = append(cols, column{"sandbox", r.sandbox})`},
		{"collector/schema/legacy/" + mig, "ALTER TABLE {{.Alter \"events\"}}{{.OnCluster}} ADD COLUMN sandbox String;"},
		{"collector/schema/modern/" + mig, "ADD COLUMN IF NOT EXISTS sandbox LowCardinality(String);"},
		{"agent/event/FIELDS.md", "| Sandbox | `sandbox` (omitted when empty) | `string` | `sandbox` | Sandbox names the sandbox flavour. |"},
		{"agent/event/FIELDS.md", "| Inode | `inode` (omitted when empty) | `uint64` |  | inode of the opened file |"},
	} {
		if got := string(files[want.file]); !strings.Contains(got, want.text) {
			t.Errorf("%s does not have %q:\n%s", want.file, want.text, got)
		}
	}
	// Generated again with the new migration in place: nothing more to add.
	for _, d := range []string{"legacy", "modern"} {
		p := "collector/schema/" + d + "/" + mig
		if err := os.WriteFile(filepath.Join(root, p), files[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for p := range again {
		if strings.Contains(p, "/0004_") {
			t.Errorf("a second migration %s for the same member", p)
		}
	}
}

// The generator refuses what the scanner could not follow, naming the member.
func TestGeneratorRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, new  string
		wantError string
	}{
		{"first member omitempty", "\tFilename  string   `json:\"filename\" ch:\"path\"`", "\tFilename  string   `json:\"filename,omitempty\" ch:\"path\"`", "Exec.Filename: the first member must not be omitempty"},
		{"type the scanner cannot read", "\tChildPID uint32 `json:\"child_pid\"`", "\tChildPID uint32 `json:\"child_pid\"`\n\tM map[string]int `json:\"m\"` // m", "Fork.M: type map[string]int"},
		{"part without a kind", "\tReload  *Reload  `json:\"reload,omitempty\"`", "\tReload  *Reload  `json:\"reload,omitempty\"`\n\tFork2 *Fork `json:\"fork2,omitempty\"`", "no Kind constant \"fork2\""},
		{"kind without a part", "\tReload  *Reload  `json:\"reload,omitempty\"`", "", "kind \"reload\" has no part"},
		{"member after the parts", "\tReload  *Reload  `json:\"reload,omitempty\"`", "\tReload  *Reload  `json:\"reload,omitempty\"`\n\tLate string `json:\"late\"`", "Event.Late: the parts must be Event's last members"},
		{"member without a doc comment", "\tChildPID uint32 `json:\"child_pid\"` // host tgid of the new process", "\tChildPID uint32 `json:\"child_pid\"`", "Fork.ChildPID: no doc comment"},
		{"unknown ch option", "ch:\"addr,ip\"", "ch:\"addr,ipv9\"", "unknown ch option"},
		{"columns of two types", "\tName   string    `json:\"name\" ch:\"syscall,lc\"`", "\tName   string    `json:\"name\" ch:\"result\"`", "column result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(scratch(t, replace(t, tc.old, tc.new)))
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("error %v, want one with %q", err, tc.wantError)
			}
		})
	}
}
