// Package benchkit holds what berm's benchmark programs share: running commands and failing
// cleanly (no daemon left behind), a bermd of their own, percentiles and the sysloop workload.
// Benchmarks report figures; nothing here asserts a speed.
package benchkit

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bermsec/berm/testenv/promscrape"
)

// cleanups run before a failed benchmark exits.
var cleanups []func()

// OnExit registers f to run when Must gives up, last registered first.
func OnExit(f func()) { cleanups = append(cleanups, f) }

// Must ends the benchmark on err, after its cleanups.
func Must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		os.Exit(1)
	}
}

// Output runs a command and returns its trimmed stdout; a failure ends the benchmark.
func Output(name string, args ...string) string {
	cmd := exec.Command(name, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		Must(fmt.Errorf("%s %v: %v: %s", name, args, err, errb.String()))
	}
	return strings.TrimSpace(string(out))
}

// Pct is the p-th percentile (0..1) of d, nearest rank below.
func Pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

// Median of f (f is left sorted).
func Median(f []float64) float64 {
	sort.Float64s(f)
	return f[len(f)/2]
}

// MS prints a duration in milliseconds.
func MS(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// BuildSysloop builds testenv/bench/sysloop (static, so that it runs in any sandbox) at dst.
func BuildSysloop(dst string) {
	build := exec.Command("go", "build", "-o", dst, "./testenv/bench/sysloop")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		Must(fmt.Errorf("build sysloop: %v: %s", err, out))
	}
}

// Workspace makes a directory under parent that the sandbox's default user (65534) owns.
func Workspace(parent, name string) string {
	ws := filepath.Join(parent, name)
	Must(os.Mkdir(ws, 0o755))
	Must(os.Chown(ws, 65534, 65534))
	return ws
}

// Daemon is a bermd of the benchmark's own: its socket, state dir and metrics port, no rules.
type Daemon struct {
	Cmd     *exec.Cmd
	State   string
	Socket  string
	Metrics string
}

// StartDaemon starts bermd and waits for its socket.
func StartDaemon(bermd, state, sock string, extra ...string) *Daemon {
	return StartDaemonLog(bermd, state, sock, nil, extra...)
}

// StartDaemonLog starts bermd as StartDaemon does, with its stderr (its log) read by follow
// instead of passed on; nil passes it on.
func StartDaemonLog(bermd, state, sock string, follow func(io.Reader), extra ...string) *Daemon {
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort())
	args := append([]string{"--state-dir", state, "--socket", sock, "--metrics", addr, "--no-rules"}, extra...)
	d := &Daemon{Cmd: exec.Command(bermd, args...), State: state, Socket: sock, Metrics: addr}
	var logs io.Reader
	if follow == nil {
		d.Cmd.Stderr = os.Stderr
	} else {
		pipe, err := d.Cmd.StderrPipe()
		Must(err)
		logs = pipe
	}
	Must(d.Cmd.Start())
	if follow != nil {
		go follow(logs)
	}
	OnExit(d.Stop)
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			return d
		}
		if i > 400 {
			Must(fmt.Errorf("bermd did not start"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop interrupts bermd and waits for it.
func (d *Daemon) Stop() {
	if d.Cmd.ProcessState == nil {
		d.Cmd.Process.Signal(os.Interrupt)
		d.Cmd.Wait()
	}
}

// Metric reads an unlabelled metric of bermd.
func (d *Daemon) Metric(name string) float64 {
	v, err := promscrape.Value(d.Metrics, name)
	Must(err)
	return v
}

// Settle waits until bermd starts no sandbox, so that a launch measured next pays for no
// refill of the one before.
func (d *Daemon) Settle() {
	for i := 0; i < 20000; i++ {
		if d.Metric("berm_sandboxes_starting") == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	Must(fmt.Errorf("bermd did not settle"))
}

// FreePort is a loopback TCP port free when asked.
func FreePort() int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	Must(err)
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}
