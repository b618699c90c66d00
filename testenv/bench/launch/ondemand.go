package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/bench/internal/benchkit"
)

// onDemand measures `berm run` with no bermd running: fully embedded (the eBPF programs loaded
// by every call), and with bermd started on demand by the first call and reached by the next
// ones; against the warm launches of the benchmark's own bermd (warm).
func onDemand(berm, work, ws, pol string, warm []time.Duration) {
	const embeddedN = 20
	state := filepath.Join(work, "embedded-state")
	var emb []time.Duration
	for i := 0; i < embeddedN; i++ {
		emb = append(emb, timeRun(berm, "run", "--daemon", "never", "--state-dir", state, "--workspace", ws, "--policy", pol, "--", "/bin/true"))
	}

	dir := filepath.Join(work, "ondemand")
	benchkit.Must(os.Mkdir(dir, 0o700))
	sock := filepath.Join(dir, "bermd.sock")
	call := func() (time.Duration, string) {
		cmd := exec.Command(berm, "run", "--socket", sock, "--workspace", ws, "--policy", pol, "--", "/bin/true")
		cmd.Env = append(os.Environ(), "BERM_DAEMON=auto", "BERM_IDLE_EXIT=10m")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			benchkit.Must(fmt.Errorf("berm run (bermd on demand): %v: %s", err, errb.String()))
		}
		return time.Since(start), errb.String()
	}
	first, errs := call()
	if !strings.Contains(errs, "berm: starting bermd") {
		benchkit.Must(fmt.Errorf("the first call with no bermd did not start one: stderr %q", errs))
	}
	pid := peerPID(sock)
	stop := func() {
		if syscall.Kill(pid, syscall.SIGTERM) == nil {
			for i := 0; i < 1000 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	benchkit.OnExit(stop)
	var later []time.Duration
	for i := 0; i < len(warm); i++ {
		// This bermd has no metrics to watch it settle: give its warm sandbox time to refill.
		time.Sleep(50 * time.Millisecond)
		d, errs := call()
		if strings.Contains(errs, "starting bermd") || peerPID(sock) != pid {
			benchkit.Must(fmt.Errorf("call %d did not reach the bermd started on demand (pid %d): stderr %q", i+2, pid, errs))
		}
		later = append(later, d)
	}
	stop()

	w50 := benchkit.Pct(warm, .5)
	fmt.Printf("## berm run without a running bermd\n\n")
	fmt.Println("`berm run -- /bin/true`, bench policy, the shipped rules. Embedded: `--daemon never`, the eBPF")
	fmt.Println("programs loaded by every call. On demand (the default): the first call starts bermd (`--idle-exit`),")
	fmt.Println("later calls reach it. Against the warm launches through this run's bermd above.")
	fmt.Println()
	fmt.Println("| variant | p50 | p99 | p50 / bermd's warm launch |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| embedded (%d calls) | %s | %s | %.1f |\n", embeddedN, benchkit.MS(benchkit.Pct(emb, .5)), benchkit.MS(benchkit.Pct(emb, .99)), float64(benchkit.Pct(emb, .5))/float64(w50))
	fmt.Printf("| on demand, first call (starts bermd) | %s | - | %.1f |\n", benchkit.MS(first), float64(first)/float64(w50))
	ratio := float64(benchkit.Pct(later, .5)) / float64(w50)
	fmt.Printf("| **on demand, later calls** (%d) | %s | %s | **%.2f** |\n", len(later), benchkit.MS(benchkit.Pct(later, .5)), benchkit.MS(benchkit.Pct(later, .99)), ratio)
	fmt.Printf("\nlater calls without a running bermd / bermd's warm launch (p50): **%.2f** (target <= 2)\n\n", ratio)
}

// peerPID is the pid of the process listening on a unix socket.
func peerPID(sock string) int {
	c, err := net.Dial("unix", sock)
	benchkit.Must(err)
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	benchkit.Must(err)
	var cred *unix.Ucred
	benchkit.Must(raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }))
	benchkit.Must(err)
	return int(cred.Pid)
}
