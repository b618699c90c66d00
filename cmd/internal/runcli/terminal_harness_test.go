package runcli_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/bermbin"
)

// callerTerminal is the terminal berm's caller runs it from: a pty opened by the test, whose
// slave is berm's stdin, stdout and stderr and whose master is the user's keyboard and screen.
type callerTerminal struct {
	master, slave *os.File

	mu     sync.Mutex
	screen bytes.Buffer
	grew   *sync.Cond
	// marker, while set, is a drain's marker the reader has not yet taken off the screen.
	marker []byte
	drains int
}

func openCallerTerminal(t *testing.T) *callerTerminal {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatalf("open the caller's pty: %v", errno)
	}
	c := &callerTerminal{master: os.NewFile(uintptr(m), "caller-master"), slave: os.NewFile(s, "caller-tty")}
	c.grew = sync.NewCond(&c.mu)
	if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 90}); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.master.Read(buf)
			c.mu.Lock()
			c.screen.Write(buf[:max(n, 0)])
			if i := bytes.Index(c.screen.Bytes(), c.marker); c.marker != nil && i >= 0 {
				rest := append([]byte(nil), c.screen.Bytes()[i+len(c.marker):]...)
				c.screen.Truncate(i)
				c.screen.Write(rest)
				c.marker = nil
			}
			c.grew.Broadcast()
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		c.slave.Close()
		c.master.Close()
	})
	return c
}

// start runs berm with this terminal as its stdio. With ctty the terminal is berm's
// controlling terminal and berm its foreground process group (as from an interactive shell);
// without, the terminal is no one's (as an agent framework's pty handed to a child can be).
func (c *callerTerminal) start(t *testing.T, ctty bool, args ...string) *exec.Cmd {
	t.Helper()
	return c.startWithStdout(t, ctty, c.slave, args...)
}

// startWithStdout is start with berm's stdout elsewhere (berm run ... > file).
func (c *callerTerminal) startWithStdout(t *testing.T, ctty bool, stdout *os.File, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bermbin.Path(t, "berm"), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.slave, stdout, c.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: ctty, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start berm: %v", err)
	}
	return cmd
}

// wait waits for berm's end and returns its exit status.
func (c *callerTerminal) wait(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	c.drain(t)
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("berm was killed by %v; screen:\n%s", ws.Signal(), c.text())
		}
		return ee.ExitCode()
	} else if err != nil {
		t.Fatalf("berm: %v", err)
	}
	return 0
}

// drain waits until the screen shows everything written to the terminal so far (berm's
// last output can still be in the pty when berm has ended): a marker written to the
// terminal now reaches the screen behind it, and the reader takes the marker off again.
func (c *callerTerminal) drain(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	c.drains++
	c.marker = fmt.Appendf(nil, "{berm-test-drain-%d}", c.drains)
	marker := c.marker
	c.mu.Unlock()
	if _, err := c.slave.Write(marker); err != nil {
		c.mu.Lock()
		c.marker = nil
		c.mu.Unlock()
		return
	}
	deadline := time.AfterFunc(60*time.Second, func() {
		c.mu.Lock()
		c.grew.Broadcast()
		c.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.marker != nil && time.Since(start) < 60*time.Second {
		c.grew.Wait()
	}
	c.marker = nil
}

// run runs berm to its end and returns its exit status.
func (c *callerTerminal) run(t *testing.T, ctty bool, args ...string) int {
	t.Helper()
	return c.wait(t, c.start(t, ctty, args...))
}

func (c *callerTerminal) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.screen.String()
}

// waitFor waits until the screen shows s after what it showed at from (a text() length).
// The deadline only keeps a broken build from hanging the test run.
func (c *callerTerminal) waitFor(t *testing.T, from int, s string) {
	t.Helper()
	deadline := time.AfterFunc(60*time.Second, func() {
		c.mu.Lock()
		c.grew.Broadcast()
		c.mu.Unlock()
	})
	defer deadline.Stop()
	start := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !strings.Contains(c.screen.String()[from:], s) {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("the caller's terminal never showed %q; it shows:\n%s", s, c.screen.String())
		}
		c.grew.Wait()
	}
}

// typeKeys is the user typing at the caller's terminal.
func (c *callerTerminal) typeKeys(t *testing.T, keys string) {
	t.Helper()
	if _, err := c.master.Write([]byte(keys)); err != nil {
		t.Fatalf("type at the caller's terminal: %v", err)
	}
}

func (c *callerTerminal) termios(t *testing.T) unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(c.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return *tio
}

// pendingInput is what the caller's shell would read next from its terminal.
func (c *callerTerminal) pendingInput(t *testing.T) int {
	t.Helper()
	n, err := unix.IoctlGetInt(int(c.slave.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *callerTerminal) rdev(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(c.slave.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Rdev
}

// launchMode is how berm runs the call: with the agent embedded, or handed to bermd.
type launchMode struct {
	name string
	args func(t *testing.T) []string // berm run's flags selecting it
}

var launchModes = []launchMode{
	{"embedded", func(t *testing.T) []string {
		return []string{"--state-dir", filepath.Join(t.TempDir(), "state"), "--daemon", "never"}
	}},
	{"bermd", func(t *testing.T) []string {
		return []string{"--socket", startBermd(t), "--daemon", "required"}
	}},
}

// startBermd starts a bermd of the test's own and returns its socket.
func startBermd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	socket := filepath.Join(dir, "bermd.sock")
	var log bytes.Buffer
	cmd := exec.Command(bermbin.Path(t, "bermd"), "--state-dir", filepath.Join(dir, "state"), "--socket", socket, "--metrics", addr, "--no-rules")
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("bermd log:\n%s", log.String())
		}
	})
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			return socket
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("bermd did not start:\n%s", log.String())
		}
	}
}
