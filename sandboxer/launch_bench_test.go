package sandboxer_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// BenchmarkLaunchByWorkspaceSize launches `berm run -- /bin/true` through a real bermd
// (warm sandboxes), alternating an empty workspace with one of 100k files, and reports the
// median of each and their ratio: a launch must not cost more with a bigger workspace (the
// target is a ratio within 1.2).
//
//	sudo go test ./sandboxer -run '^$' -bench LaunchByWorkspaceSize -benchtime 100x
func BenchmarkLaunchByWorkspaceSize(b *testing.B) {
	bermbin.RequireRoot(b)
	dir := b.TempDir()
	empty, big := filepath.Join(dir, "empty"), filepath.Join(dir, "big")
	for _, ws := range []string{empty, big} {
		if err := os.Mkdir(ws, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	// 100k files in 100 directories, the shape of a checkout with its dependencies.
	for d := 0; d < 100; d++ {
		sub := filepath.Join(big, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 1000; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%04d", f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	socket, log := startBermd(b)
	launch := func(ws string) time.Duration {
		cmd := exec.Command(bermbin.Path(b, "berm"), "run", "--socket", socket, "--daemon", "required", "--workspace", ws, "--", "/bin/true")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("berm run: %v\n%s\nbermd:\n%s", err, out, log)
		}
		took := time.Since(start)
		// Let the pool refill: the warm launch is measured, not a cold one after a burst.
		time.Sleep(30 * time.Millisecond)
		return took
	}
	launch(empty)
	launch(big)
	var te, tb []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		te = append(te, launch(empty))
		tb = append(tb, launch(big))
	}
	b.StopTimer()
	me, mb := median(te), median(tb)
	b.ReportMetric(float64(me.Microseconds())/1000, "ms-empty")
	b.ReportMetric(float64(mb.Microseconds())/1000, "ms-100k")
	b.ReportMetric(float64(mb)/float64(me), "ratio")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// startBermd starts a bermd for one test or benchmark (warm sandboxes, its own state and
// socket) and returns its socket and log.
func startBermd(tb testing.TB) (string, *bytes.Buffer) {
	tb.Helper()
	dir := tb.TempDir()
	socket := filepath.Join(dir, "bermd.sock")
	log := &bytes.Buffer{}
	d := exec.Command(bermbin.Path(tb, "bermd"), "--state-dir", filepath.Join(dir, "state"), "--socket", socket,
		"--metrics", "127.0.0.1:0", "--no-rules")
	d.Stderr = log
	if err := d.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Process.Signal(os.Interrupt); d.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			return socket, log
		}
		if time.Now().After(deadline) {
			tb.Fatalf("bermd did not start:\n%s", log)
		}
	}
}
