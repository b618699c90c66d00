package runcli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The hostile tools below are Python from the host's /usr (granted by the strict policy).
const python = "/usr/bin/python3"

// injectKeys types "id\n" into the tool's stdin's terminal (TIOCSTI); refused there, it
// takes the terminal as its own controlling terminal first (a new session, TIOCSCTTY), which
// works on a terminal that is no one's.
const injectKeys = `
import fcntl, os, termios
def inject():
    for c in b"id\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
try:
    inject()
    print("INJECTED", flush=True)
except OSError as e:
    try:
        os.setsid()
    except OSError:
        pass
    try:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        inject()
        print("INJECTED-AS-CTTY", flush=True)
    except OSError as e2:
        print("INJECTION-REFUSED", e.errno, e2.errno, flush=True)
`

// A tool that injects keystrokes does so into its own pty: nothing is left in the caller's
// terminal for the caller's shell to read (and run) after berm exits.
func TestTerminalToolCannotInjectIntoCallersTerminal(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, m := range launchModes {
		for _, ctty := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/caller-ctty=%v", m.name, ctty), func(t *testing.T) {
				term := openCallerTerminal(t)
				args := append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...)
				status := term.run(t, ctty, append(args, "--", python, "-c", injectKeys)...)
				if status != 0 {
					t.Fatalf("berm run: status %d; screen:\n%s", status, term.text())
				}
				if n := term.pendingInput(t); n != 0 {
					t.Fatalf("the tool left %d bytes of input in the caller's terminal; screen:\n%s", n, term.text())
				}
			})
		}
	}
}

// changeSettings turns off echo, canonical mode and signals on the tool's stdin's terminal,
// then ends as its argument says.
const changeSettings = `
import os, sys, termios, time
a = termios.tcgetattr(0)
a[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG)
termios.tcsetattr(0, termios.TCSANOW, a)
print("SETTINGS-CHANGED", flush=True)
if sys.argv[1] == "kill-self":
    os.kill(os.getpid(), 9)
if sys.argv[1] == "wait":
    time.sleep(600)
`

// What the tool does to its terminal's settings stays on its pty: the caller's terminal has
// its settings back however the call ends.
func TestTerminalCallerSettingsRestored(t *testing.T) {
	bermbin.RequireRoot(t)
	endings := []struct {
		name   string
		tool   string         // changeSettings' argument
		flags  []string       // more berm run flags
		signal syscall.Signal // sent to berm once the tool has changed the settings
		status func(int) bool // berm's expected exit status
	}{
		{"tool-exits", "exit", nil, 0, func(s int) bool { return s == 0 }},
		{"tool-killed", "kill-self", nil, 0, func(s int) bool { return s == 128+9 }},
		{"call-capped", "wait", []string{"--timeout", "10s"}, 0, func(s int) bool { return s == event.StatusTimeout }},
		{"berm-sigint", "wait", nil, syscall.SIGINT, func(s int) bool { return s != 0 }},
		{"berm-sigterm", "wait", nil, syscall.SIGTERM, func(s int) bool { return s != 0 }},
	}
	for _, m := range launchModes {
		for _, e := range endings {
			t.Run(m.name+"/"+e.name, func(t *testing.T) {
				term := openCallerTerminal(t)
				before := term.termios(t)
				args := append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...)
				args = append(append(args, e.flags...), "--", python, "-c", changeSettings, e.tool)
				cmd := term.start(t, true, args...)
				if e.signal != 0 {
					term.waitFor(t, 0, "SETTINGS-CHANGED")
					cmd.Process.Signal(e.signal)
				}
				status := term.wait(t, cmd)
				if !strings.Contains(term.text(), "SETTINGS-CHANGED") {
					t.Fatalf("the tool did not get to change its terminal's settings (status %d); screen:\n%s", status, term.text())
				}
				if !e.status(status) {
					t.Errorf("berm run: unexpected status %d; screen:\n%s", status, term.text())
				}
				if after := term.termios(t); after != before {
					t.Fatalf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v\nscreen:\n%s", before, after, term.text())
				}
			})
		}
	}
}

// trapInt is an innocent tool that waits for Ctrl-C and ends with 42 when it gets SIGINT.
const trapInt = `trap 'echo GOT-SIGINT; exit 42' INT; echo READY; while :; do sleep 1; done`

// Ctrl-C typed at the caller's terminal reaches the tool as SIGINT, from its pty's line
// discipline, even after an earlier call in the same terminal turned off signals (ISIG) on
// its stdin: that call's settings stayed on its own pty.
func TestTerminalCtrlCInterruptsTheTool(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			flags := m.args(t)
			ws := bermbin.Workspace(t)
			first := append(append([]string{"run", "--workspace", ws}, flags...), "--", python, "-c", changeSettings, "exit")
			if status := term.run(t, true, first...); status != 0 {
				t.Fatalf("first call: status %d; screen:\n%s", status, term.text())
			}
			from := len(term.text())
			second := append(append([]string{"run", "--workspace", ws, "--timeout", "20s"}, flags...), "--", "/bin/sh", "-c", trapInt)
			cmd := term.start(t, true, second...)
			term.waitFor(t, from, "READY")
			term.typeKeys(t, "\x03")
			status := term.wait(t, cmd)
			if status != 42 || !strings.Contains(term.text()[from:], "GOT-SIGINT") {
				t.Fatalf("Ctrl-C did not interrupt the tool: status %d; screen:\n%s", status, term.text()[from:])
			}
		})
	}
}

// ttyInfo prints what the tool knows of its stdin's terminal and its session.
const ttyInfo = `
import os
st = os.fstat(0)
tty = os.isatty(0)
try:
    name = os.ttyname(0)
except OSError as e:
    name = "unnamed:" + str(e.errno)
print("TTYINFO", tty, st.st_rdev, os.getsid(0) == os.getpid(), tty and os.tcgetpgrp(0) == os.getpgrp(), name, flush=True)
`

// The tool's terminal is a pty of its own, not the caller's: it leads its own session, and
// the pty is its controlling terminal (its foreground process group is the tool's).
func TestTerminalIsTheToolsOwn(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...), "--", python, "-c", ttyInfo)
			if status := term.run(t, true, args...); status != 0 {
				t.Fatalf("berm run: status %d; screen:\n%s", status, term.text())
			}
			var isTTY, leader, foreground, name string
			var rdev uint64
			screen := term.text()
			i := strings.Index(screen, "TTYINFO")
			if i < 0 {
				t.Fatalf("no TTYINFO; screen:\n%s", screen)
			}
			if _, err := fmt.Sscan(screen[i+len("TTYINFO"):], &isTTY, &rdev, &leader, &foreground, &name); err != nil {
				t.Fatalf("parse TTYINFO: %v; screen:\n%s", err, screen)
			}
			const ptySlaveMajor = 136 // UNIX98_PTY_SLAVE_MAJOR, through 143
			if major := unixMajor(rdev); isTTY != "True" || major < ptySlaveMajor || major > ptySlaveMajor+7 {
				t.Errorf("the tool's stdin is not a pty: isatty %s, device %d:%d", isTTY, major, rdev&0xff)
			}
			if rdev == term.rdev(t) {
				t.Errorf("the tool's stdin is the caller's terminal (device %#x)", rdev)
			}
			// ttyname(3), as tty(1) uses it: the call's /dev shows its own pty under its name.
			if callerName, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(term.slave.Fd()))); err != nil || !strings.HasPrefix(name, "/dev/pts/") || name == callerName {
				t.Errorf("the tool's ttyname is %q (the caller's terminal is %q)", name, callerName)
			}
			if leader != "True" || foreground != "True" {
				t.Errorf("the tool does not lead its own session on its own terminal: session leader %s, foreground %s", leader, foreground)
			}
		})
	}
}

func unixMajor(rdev uint64) uint64 { return ((rdev >> 8) & 0xfff) | ((rdev >> 32) & ^uint64(0xfff)) }

// Without a terminal nothing changes for the tool's stdio (pipes pass through), and the tool
// still runs in a session of its own, which has no controlling terminal.
func TestNoTerminalPipesPassThrough(t *testing.T) {
	bermbin.RequireRoot(t)
	const tool = `
import os, sys
print("SESSION-LEADER", os.getsid(0) == os.getpid(), "STDIN-TTY", os.isatty(0), "STDOUT-TTY", os.isatty(1))
try:
    os.open("/dev/tty", os.O_RDWR)
    print("CTTY yes")
except OSError as e:
    print("CTTY no")
print("READ", sys.stdin.read().strip())
`
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...), "--", python, "-c", tool)
			r := bermbin.BermIn(t, nil, strings.NewReader("through the pipe\n"), args...)
			if r.Exit != 0 {
				t.Fatalf("berm run: status %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
			}
			for _, want := range []string{"SESSION-LEADER True STDIN-TTY False STDOUT-TTY False", "CTTY no", "READ through the pipe"} {
				if !strings.Contains(r.Stdout, want) {
					t.Errorf("want %q in the tool's output:\n%s", want, r.Stdout)
				}
			}
			if strings.Contains(r.Stdout, "\r\n") {
				t.Errorf("the tool's output went through a terminal (CRLF):\n%q", r.Stdout)
			}
		})
	}
}

// The pty follows the caller's window: its size at the start, and each change (SIGWINCH).
func TestTerminalWindowSizeFollowsTheCaller(t *testing.T) {
	bermbin.RequireRoot(t)
	const tool = `
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGWINCH])
s = os.get_terminal_size(0)
print("SIZE", s.lines, s.columns, flush=True)
signal.sigwait([signal.SIGWINCH])
s = os.get_terminal_size(0)
print("RESIZED", s.lines, s.columns, flush=True)
`
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t), "--timeout", "60s"}, m.args(t)...), "--", python, "-c", tool)
			cmd := term.start(t, true, args...)
			term.waitFor(t, 0, "SIZE 30 90")
			setSize(t, term, 41, 123)
			term.waitFor(t, 0, "RESIZED 41 123")
			if status := term.wait(t, cmd); status != 0 {
				t.Fatalf("berm run: status %d; screen:\n%s", status, term.text())
			}
		})
	}
}

func setSize(t *testing.T, term *callerTerminal, rows, cols int) {
	t.Helper()
	if err := unix.IoctlSetWinsize(int(term.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); err != nil {
		t.Fatalf("resize the caller's terminal: %v", err)
	}
}

// What the tool writes to its pty counts against the call's output cap as a pipe's would.
func TestTerminalOutputIsCapped(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			summary := filepath.Join(t.TempDir(), "summary.json")
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t), "--output-limit", "64Ki", "--summary", summary}, m.args(t)...), "--", "/usr/bin/yes", "flood")
			status := term.run(t, true, args...)
			data, err := os.ReadFile(summary)
			if err != nil {
				t.Fatalf("berm run: status %d, no summary: %v; screen:\n%.2000s", status, err, term.text())
			}
			var rec event.CallRecord
			if err := json.Unmarshal(data, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.EndReason != event.EndOutputLimit || rec.OutputBytes < 64<<10 {
				t.Fatalf("the flood through the pty was not capped: end %s, %d output bytes, status %d", rec.EndReason, rec.OutputBytes, status)
			}
		})
	}
}

// From a terminal with stdout redirected (berm run ... > file), the tool's stdout is what the
// caller's is: the file gets the tool's own bytes, not a terminal's (CRLF), and the tool sees
// a terminal only on stdin and stderr.
func TestTerminalRedirectedStdoutKeepsBytes(t *testing.T) {
	bermbin.RequireRoot(t)
	const tool = `
import os, sys
sys.stderr.write("TTYS %s %s %s\n" % (os.isatty(0), os.isatty(1), os.isatty(2)))
sys.stdout.write("line one\nline two\n")
`
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			out, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...), "--", python, "-c", tool)
			if status := term.wait(t, term.startWithStdout(t, true, out, args...)); status != 0 {
				t.Fatalf("berm run: status %d; screen:\n%s", status, term.text())
			}
			data, err := os.ReadFile(out.Name())
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != "line one\nline two\n" {
				t.Errorf("the file got %q", data)
			}
			if !strings.Contains(term.text(), "TTYS True False True") {
				t.Errorf("want the tool's stdin and stderr on a terminal, its stdout not; screen:\n%s", term.text())
			}
		})
	}
}

// berm stopped and continued (SIGSTOP, then fg) takes its terminal back in raw mode: the
// shell had it in its own mode in between. A key typed without Enter then reaches the tool,
// which reads one key at a time.
func TestTerminalRawAgainAfterStopAndContinue(t *testing.T) {
	bermbin.RequireRoot(t)
	const tool = `
import sys, tty
tty.setcbreak(0)
print("READY", flush=True)
print("GOT", sys.stdin.read(1), flush=True)
`
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			before := term.termios(t)
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t), "--timeout", "30s"}, m.args(t)...), "--", python, "-c", tool)
			cmd := term.start(t, true, args...)
			term.waitFor(t, 0, "READY")
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The shell, back in charge of the terminal, puts its own settings on it.
			if err := unix.IoctlSetTermios(int(term.slave.Fd()), unix.TCSETS, &before); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			term.typeKeys(t, "x")
			if status := term.wait(t, cmd); status != 0 || !strings.Contains(term.text(), "GOT x") {
				t.Fatalf("the key did not reach the tool after berm continued: status %d; screen:\n%s", status, term.text())
			}
			if after := term.termios(t); after != before {
				t.Fatalf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// With stdin not a terminal, berm run from an interactive shell (berm run ... < /dev/null)
// still has the shell's terminal as its controlling terminal. The tool runs in a session of
// its own, without one: under a policy that grants /dev/tty, opening it fails, so the tool
// can neither type into the shell (TIOCSTI) nor change the terminal's settings.
func TestNoTerminalToolHasNoControllingTerminal(t *testing.T) {
	bermbin.RequireRoot(t)
	policy := filepath.Join(t.TempDir(), "tty-granted.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata:
  name: tty-granted
spec:
  filesystem:
    write: ["${WORKSPACE}", "${TMP}", /dev/null, /dev/tty]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	const tool = `
import fcntl, os, termios
try:
    fd = os.open("/dev/tty", os.O_RDWR)
except OSError as e:
    print("NO-CTTY", e.errno, flush=True)
    raise SystemExit(0)
a = termios.tcgetattr(fd)
a[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG)
termios.tcsetattr(fd, termios.TCSANOW, a)
for c in b"id\n":
    fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
print("CTTY-REACHED", flush=True)
`
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			before := term.termios(t)
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t), "--policy", policy}, m.args(t)...), "--", python, "-c", tool)
			cmd := exec.Command(bermbin.Path(t, "berm"), args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			// stdin: none (/dev/null); the caller's terminal is berm's controlling terminal.
			cmd.ExtraFiles = []*os.File{term.slave}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 3}
			if err := cmd.Run(); err != nil {
				t.Fatalf("berm run: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "NO-CTTY") {
				t.Errorf("the tool reached a controlling terminal:\n%s", out.String())
			}
			if n := term.pendingInput(t); n != 0 {
				t.Errorf("the tool left %d bytes of input in the caller's terminal", n)
			}
			if after := term.termios(t); after != before {
				t.Errorf("the caller's terminal settings changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}
