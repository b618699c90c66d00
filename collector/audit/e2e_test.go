package audit_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// A tool that names its files to forge the viewer: a newline, an escape sequence that erases
// the line above, and a whole forged row. Through a real call, `berm timeline` and `berm
// calls` print no raw control byte and exactly one row per event, and the names show escaped.
func TestTimelineOfHostileFileNames(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	script := `touch "$(printf 'a\nb')" "$(printf '\033[2K\033[1A')" "$(printf 'x\n42\t+0.000001\t1\tsh\topen\tshadow RDONLY -> 3')" "$(printf 'del\177')"`
	r := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--call-id", "hostile-names", "--workspace", ws, "--", "sh", "-c", script)
	if r.Exit != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "hostile-names")
	created := 0
	for _, e := range tl.Events {
		// The kernel's path of the file opened: the workspace's, ending in the name exactly.
		if e.Open != nil && (strings.HasSuffix(e.Open.Path, "/a\nb") || strings.HasSuffix(e.Open.Path, "/\033[2K\033[1A")) {
			created++
		}
	}
	if created != 2 {
		t.Fatalf("the JSON timeline has %d of the two hostile opens exactly (JSON must stay exact)", created)
	}

	out := bermbin.Berm(t, nil, "timeline", "--state-dir", state, "hostile-names")
	if out.Exit != 0 {
		t.Fatalf("berm timeline: exit %d: %s", out.Exit, out.Stderr)
	}
	noRawControl(t, out.Stdout)
	for _, want := range []string{`a\nb`, `\033[2K\033[1A`, `x\n42\t+0.000001\t1\tsh\topen\tshadow RDONLY -> 3`, `del\177`} {
		if !strings.Contains(out.Stdout, want) {
			t.Errorf("timeline does not show %s escaped:\n%s", want, out.Stdout)
		}
	}
	// One row per event, numbered in order: nothing forged a row.
	_, rows, ok := strings.Cut(out.Stdout, "\nSEQ ")
	if !ok {
		t.Fatalf("no event table:\n%s", out.Stdout)
	}
	lines := strings.Split(strings.TrimSuffix(rows, "\n"), "\n")[1:]
	if len(lines) != len(tl.Events) {
		t.Fatalf("%d rows for %d events:\n%s", len(lines), len(tl.Events), out.Stdout)
	}
	for i, l := range lines {
		seq, _, _ := strings.Cut(l, " ")
		if seq != strconv.FormatUint(tl.Events[i].Seq, 10) {
			t.Fatalf("row %d starts with %q, want seq %d:\n%s", i, seq, tl.Events[i].Seq, out.Stdout)
		}
	}

	calls := bermbin.Berm(t, nil, "calls", "--state-dir", state)
	noRawControl(t, calls.Stdout)
}

func noRawControl(t *testing.T, out string) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("raw control byte %#x at %d:\n%s", c, i, out)
		}
	}
}
