package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a real server a test runs (ClickHouse, Grafana, Prometheus): in its own process
// group, so that stopping it stops its children too and a Ctrl-C of the test does not leave
// it half-dead, and killed with the test binary (Pdeathsig) when the test crashes.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts cmd with its stdout and stderr appended to logPath.
func StartProc(cmd *exec.Cmd, logPath string) (*Proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open server log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); out.Close(); close(p.done) }()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends sig to the process group and waits for the process; past grace (when not 0)
// it sends SIGKILL.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
	if grace > 0 {
		select {
		case <-p.done:
			return
		case <-time.After(grace):
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-p.done
}

// WaitReady polls ready every interval until it says yes; it fails when the process exits
// first or ctx ends, with the end of the server's log (tail) in the error.
func (p *Proc) WaitReady(ctx context.Context, what string, every time.Duration, ready func() bool, tail func() string) error {
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start: %s", what, tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w: %s", what, ctx.Err(), tail())
		case <-time.After(every):
		}
	}
}

// ServerForTest starts a real server for t (start, within timeout) and stops it when t ends.
// When it cannot be started the test fails, except when it is not root, where it skips with
// the reason: root can install or build what is missing, and CI runs as root, so a test that
// needs the real server never passes silently there.
func ServerForTest[S any](t testing.TB, what string, timeout time.Duration, start func(context.Context) (S, error), stop func(S)) S {
	t.Helper()
	Integration(t, what)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := start(ctx)
	if err != nil {
		RequireRoot(t, fmt.Sprintf("%s is needed (%v)", what, err))
		t.Fatalf("start %s: %v", what, err)
	}
	t.Cleanup(func() { stop(s) })
	return s
}

// LogTail is the end (3000 bytes at most) of each of a server's log files that has anything
// in it, for error messages.
func LogTail(paths ...string) string {
	var parts []string
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		if len(b) > 0 {
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, "\n")
}
