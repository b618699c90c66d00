package sandboxer

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// scanTree is a workspace with one of each kind of leftover, made after since, next to an
// older FIFO and setuid file (the owner's), a host directory the workspace links to, and a
// mount inside the workspace (another file system: not the call's).
type scanTree struct {
	ws, host string
	since    time.Time
}

func newScanTree(t *testing.T) scanTree {
	t.Helper()
	bermbin.RequireRoot(t)
	ws, host := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(unix.Mkfifo(filepath.Join(ws, "old-fifo"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "old-suid"), nil, 0o755))
	must(os.Chmod(filepath.Join(ws, "old-suid"), 0o755|os.ModeSetuid))
	// The older files' ctime must be before since, which is as a call takes it.
	time.Sleep(2 * ctimeMargin)
	since := time.Now().Add(-ctimeMargin)

	must(os.WriteFile(filepath.Join(host, "suid"), nil, 0o755))
	must(os.Chmod(filepath.Join(host, "suid"), 0o755|os.ModeSetuid))
	must(unix.Mkfifo(filepath.Join(host, "fifo"), 0o644))
	must(os.MkdirAll(filepath.Join(ws, "sub", "mnt"), 0o755))
	must(unix.Mount("berm-test", filepath.Join(ws, "sub", "mnt"), "tmpfs", 0, "size=64k"))
	t.Cleanup(func() { unix.Unmount(filepath.Join(ws, "sub", "mnt"), unix.MNT_DETACH) })
	must(unix.Mkfifo(filepath.Join(ws, "sub", "mnt", "fifo-on-another-fs"), 0o644))

	must(unix.Mknod(filepath.Join(ws, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mkfifo(filepath.Join(ws, "sub", "result.csv"), 0o644))
	ln, err := net.Listen("unix", filepath.Join(ws, "sub", "sock"))
	must(err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	must(os.WriteFile(filepath.Join(ws, "sub", "suid"), nil, 0o700))
	must(os.Chmod(filepath.Join(ws, "sub", "suid"), 0o700|os.ModeSetuid|os.ModeSetgid))
	for _, l := range [][2]string{{host + "/suid", "suid-link"}, {host + "/fifo", "fifo-link"}, {host, "hostdir"}, {host, "sub/hostdir"}} {
		must(os.Symlink(l[0], filepath.Join(ws, l[1])))
	}
	return scanTree{ws: ws, host: host, since: since}
}

func (tr scanTree) scan(t *testing.T, s leftoverScan) leftoverScan {
	t.Helper()
	root, err := unix.Open(tr.ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	s.root, s.since = root, tr.since
	if s.limit == 0 {
		s.limit = leftoverScanLimit
	}
	s.run()
	return s
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestLeftoverScan(t *testing.T) {
	all := []event.Leftover{
		{Path: "null", Kind: "device"},
		{Path: "sub/result.csv", Kind: "fifo"},
		{Path: "sub/sock", Kind: "socket"},
		{Path: "sub/suid", Kind: "setuid+setgid"},
	}
	for _, tc := range []struct {
		name            string
		scan            leftoverScan
		special, setuid string // the action on each
	}{
		{"strict", leftoverScan{}, "removed", "cleared"},
		{"special files allowed", leftoverScan{allowSpecial: true}, keptAllowed, "cleared"},
		{"audit mode", leftoverScan{audit: true}, "kept (audit mode)", "kept (audit mode)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newScanTree(t)
			s := tr.scan(t, tc.scan)
			var want []event.Leftover
			for _, lo := range all {
				lo.Action = tc.special
				if lo.Kind == "setuid+setgid" {
					lo.Action = tc.setuid
				}
				want = append(want, lo)
			}
			got := slices.Clone(s.found)
			slices.SortFunc(got, func(a, b event.Leftover) int { return strings.Compare(a.Path, b.Path) })
			if !slices.Equal(got, want) || s.truncated {
				t.Fatalf("found %+v (truncated %v), want %+v", got, s.truncated, want)
			}
			for _, lo := range all {
				if lo.Kind == "setuid+setgid" {
					continue
				}
				if gone := !exists(filepath.Join(tr.ws, lo.Path)); gone != (tc.special == "removed") {
					t.Errorf("%s: gone %v, action %s", lo.Path, gone, tc.special)
				}
			}
			st, _ := os.Stat(filepath.Join(tr.ws, "sub", "suid"))
			if cleared := st.Mode()&(os.ModeSetuid|os.ModeSetgid) == 0; cleared != (tc.setuid == "cleared") || st.Mode().Perm() != 0o700 {
				t.Errorf("sub/suid mode %v, action %s", st.Mode(), tc.setuid)
			}
			// Nothing outside the workspace, on another file system, or older than the call.
			if st, _ := os.Stat(filepath.Join(tr.host, "suid")); st.Mode()&os.ModeSetuid == 0 {
				t.Error("the host's setuid file behind a symlink lost its bit")
			}
			for _, p := range []string{filepath.Join(tr.host, "fifo"), filepath.Join(tr.ws, "sub/mnt/fifo-on-another-fs"), filepath.Join(tr.ws, "old-fifo")} {
				if !exists(p) {
					t.Errorf("%s was removed", p)
				}
			}
			if st, _ := os.Stat(filepath.Join(tr.ws, "old-suid")); st.Mode()&os.ModeSetuid == 0 {
				t.Error("the owner's older setuid file lost its bit")
			}
		})
	}
}

// The scan stops at its bound in entries and says so; a flood of leftovers is acted on in
// full but listed only up to the report cap.
func TestLeftoverScanBounds(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := t.TempDir()
	since := time.Now().Add(-time.Second)
	for i := range 50 {
		os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%02d", i)), nil, 0o644)
	}
	// More FIFOs than the record lists, over two directories: the second is scanned (and
	// cleaned) after the list is full.
	for i := range leftoverReportLimit + 20 {
		dir := filepath.Join(ws, "z", fmt.Sprint(i%2))
		os.MkdirAll(dir, 0o755)
		if err := unix.Mkfifo(filepath.Join(dir, fmt.Sprintf("p%03d", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)

	s := leftoverScan{root: root, since: since, limit: 40}
	s.run()
	if !s.truncated || len(s.found) != 0 || s.entries != 41 {
		t.Fatalf("bound 40: truncated %v, found %d, entries %d", s.truncated, len(s.found), s.entries)
	}
	s = leftoverScan{root: root, since: since, limit: leftoverScanLimit}
	s.run()
	left0, _ := os.ReadDir(filepath.Join(ws, "z", "0"))
	left1, _ := os.ReadDir(filepath.Join(ws, "z", "1"))
	if s.truncated || len(s.found) != leftoverReportLimit || s.unlisted != 20 || len(left0)+len(left1) != 0 {
		t.Fatalf("flood: truncated %v, listed %d, unlisted %d, %d left in the workspace", s.truncated, len(s.found), s.unlisted, len(left0)+len(left1))
	}
}

// A FIFO hidden deeper than a path can name is not reached: the scan says it is incomplete.
func TestLeftoverScanTooDeep(t *testing.T) {
	bermbin.RequireRoot(t)
	ws := t.TempDir()
	since := time.Now().Add(-time.Second)
	root, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	dir, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 250)
	for range 20 { // 20 × 251 bytes: past PATH_MAX
		if err := unix.Mkdirat(dir, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			t.Fatal(err)
		}
		dir = next
	}
	if err := unix.Mkfifoat(dir, "result.csv", 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Close(dir)
	s := leftoverScan{root: root, since: since, limit: leftoverScanLimit}
	s.run()
	if !s.truncated {
		t.Fatalf("a FIFO past PATH_MAX was not reached and the scan claims it is complete (found %+v)", s.found)
	}
}

// The scan's cost on a workspace of 100k files (the bound), none of them leftovers.
func BenchmarkLeftoverScan100k(b *testing.B) {
	ws := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(ws, fmt.Sprintf("d%03d", d))
		os.Mkdir(dir, 0o755)
		for f := range 999 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), nil, 0o644)
		}
	}
	root, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(root)
	b.ResetTimer()
	for b.Loop() {
		s := leftoverScan{root: root, since: time.Now(), limit: leftoverScanLimit}
		s.run()
		if s.truncated || s.entries != 100*1000 {
			b.Fatalf("entries %d, truncated %v", s.entries, s.truncated)
		}
	}
}
