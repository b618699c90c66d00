// Command bigworkspace measures what a workspace's size costs a call (issue 29, item 2): the
// same call of /bin/true in an empty workspace and in one of a million files, interleaved,
// through one bermd (warm sandboxes) and embedded (`berm run --daemon never`). Nothing of the
// call walks the workspace (special files and set-id modes are refused when made), so the two
// should cost the same. The million files are made once and kept in a cache directory
// (--cache) for the next run. It prints a markdown report. Figures, not assertions.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

func main() {
	bin := flag.String("bin", "bin", "directory with berm and bermd")
	dirs := flag.Int("dirs", 1000, "directories of the big workspace")
	perDir := flag.Int("files", 1000, "empty files in each directory")
	calls := flag.Int("calls", 100, "calls through bermd in each workspace")
	embedded := flag.Int("embedded", 10, "embedded calls in each workspace")
	cache := flag.String("cache", filepath.Join(os.TempDir(), "berm-bench-bigworkspace"), "where the big workspace is kept between runs")
	flag.Parse()
	berm, bermd := filepath.Join(*bin, "berm"), filepath.Join(*bin, "bermd")

	total := *dirs * *perDir
	big, made := bigWorkspace(*cache, *dirs, *perDir)

	work, err := os.MkdirTemp("", "berm-bench-bigws.")
	benchkit.Must(err)
	defer os.RemoveAll(work)
	benchkit.OnExit(func() { os.RemoveAll(work) })
	benchkit.Must(os.Chmod(work, 0o755))
	empty := benchkit.Workspace(work, "empty")

	d := benchkit.StartDaemon(bermd, filepath.Join(work, "state"), filepath.Join(work, "bermd.sock"))
	defer d.Stop()
	call := func(ws string, args ...string) time.Duration {
		a := append([]string{"run"}, args...)
		a = append(a, "--workspace", ws, "--", "/bin/true")
		start := time.Now()
		if out, err := exec.Command(berm, a...).CombinedOutput(); err != nil {
			benchkit.Must(fmt.Errorf("berm %v: %v: %s", a, err, out))
		}
		return time.Since(start)
	}
	daemon := []string{"--socket", d.Socket, "--daemon", "required"}
	var emptyD, bigD []time.Duration
	for i := 0; i < *calls; i++ {
		d.Settle()
		emptyD = append(emptyD, call(empty, daemon...))
		d.Settle()
		bigD = append(bigD, call(big, daemon...))
	}
	d.Stop()
	var emptyE, bigE []time.Duration
	state := filepath.Join(work, "embedded-state")
	for i := 0; i < *embedded; i++ {
		emptyE = append(emptyE, call(empty, "--daemon", "never", "--state-dir", state))
		bigE = append(bigE, call(big, "--daemon", "never", "--state-dir", state))
	}

	fmt.Printf("## A call in an empty workspace and in one of %d files\n\n", total)
	fmt.Printf("`berm run -- /bin/true`, the strict policy, the two workspaces interleaved; the big one (%d directories of %d empty files) ", *dirs, *perDir)
	if made > 0 {
		fmt.Printf("made for this run in %.1f s.\n\n", made.Seconds())
	} else {
		fmt.Printf("from the cache (%s).\n\n", *cache)
	}
	fmt.Println("| mode | calls | empty p50 | empty p95 | big p50 | big p95 | big / empty (p50) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	row := func(name string, e, b []time.Duration) {
		pe, pb := benchkit.Pct(e, 0.50), benchkit.Pct(b, 0.50)
		fmt.Printf("| %s | %d + %d | %s | %s | %s | %s | **%.2f** |\n", name, len(e), len(b), benchkit.MS(pe), benchkit.MS(benchkit.Pct(e, 0.95)),
			benchkit.MS(pb), benchkit.MS(benchkit.Pct(b, 0.95)), float64(pb)/float64(pe))
	}
	row("through bermd, warm", emptyD, bigD)
	row("embedded (`--daemon never`)", emptyE, bigE)
	fmt.Println("\ntarget: big / empty ≤ 1.2 (issue 29)")
}

// bigWorkspace returns the cached workspace of dirs × perDir empty files, making it first if
// no complete one is there (and how long that took; 0 from the cache).
func bigWorkspace(cache string, dirs, perDir int) (string, time.Duration) {
	ws := filepath.Join(cache, fmt.Sprintf("ws-%dx%d", dirs, perDir))
	marker := filepath.Join(cache, "complete-"+filepath.Base(ws))
	if _, err := os.Stat(marker); err == nil {
		return ws, 0
	}
	start := time.Now()
	os.RemoveAll(ws)
	benchkit.Must(os.MkdirAll(ws, 0o755))
	benchkit.Must(os.Chmod(cache, 0o755))
	benchkit.Must(os.Chown(ws, 65534, 65534))
	for i := 0; i < dirs; i++ {
		dir := filepath.Join(ws, strconv.Itoa(i))
		benchkit.Must(os.Mkdir(dir, 0o755))
		for j := 0; j < perDir; j++ {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(j)), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			benchkit.Must(err)
			f.Close()
		}
	}
	benchkit.Must(os.WriteFile(marker, nil, 0o644))
	return ws, time.Since(start)
}
