package collector

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bermsec/berm/collector/internal/schemagen"
)

// TestGeneratedUpToDate fails when a file that follows from agent/event differs from what the
// generator writes now: a member added without `go generate ./collector`, or a generated
// file edited by hand.
func TestGeneratedUpToDate(t *testing.T) {
	root := ".."
	files, err := schemagen.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./collector)", p, err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from what agent/event generates (run go generate ./collector)", p)
		}
	}
}
