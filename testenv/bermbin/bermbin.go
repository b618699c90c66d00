// Package bermbin builds the berm binaries once per test process and runs them, for tests
// that exercise berm the way a user does: real binaries, real kernel, real processes.
package bermbin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/testutil"
)

// RequireRoot is testutil.RequireRoot for the tests that run berm's binaries.
func RequireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "eBPF, cgroups and namespaces are real here")
}

var (
	once     sync.Once
	binDir   string
	buildErr error
)

// RepoRoot is the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Path builds (once) and returns the path of a command from ./cmd.
func Path(t testing.TB, name string) string {
	t.Helper()
	once.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "berm-test-bin-")
		if buildErr != nil {
			return
		}
		// berm is the C front (as make build builds it); the rest are Go.
		cc := exec.Command("make", "--no-print-directory", "-s", "front", "FRONT="+filepath.Join(binDir, "berm"))
		cc.Dir = RepoRoot()
		if out, err := cc.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("make front: %v\n%s", err, out)
			return
		}
		for _, c := range []string{"berm-front", "berm-full", "bermd", "berm-init", "berm-collector"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "./cmd/"+c)
			cmd.Dir = RepoRoot()
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Exit           int
}

// Berm runs the berm CLI and waits for it.
func Berm(t testing.TB, env []string, args ...string) Result {
	t.Helper()
	return BermIn(t, env, nil, args...)
}

// BermIn runs the berm CLI with stdin (nil: none) and waits for it.
func BermIn(t testing.TB, env []string, stdin io.Reader, args ...string) Result {
	t.Helper()
	cmd := exec.Command(Path(t, "berm"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	return Run(t, cmd)
}

// WaitFile waits (10 s at most) for the call cmd started to make marker (a file the tool
// writes once it runs), then removes it. A call that does not get there is killed and fails
// the test.
func WaitFile(t testing.TB, cmd *exec.Cmd, marker string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("%v: the call did not start (no %s)", cmd.Args, marker)
		}
	}
	os.Remove(marker)
}

// Run runs cmd with its stdout and stderr captured; a command that could not run at all
// fails the test.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return Result{out.String(), errb.String(), code}
}

// Start starts cmd with its stdout and stderr captured and gives its Result once it has
// ended, for a test that acts while the command runs (decides an approval, kills its
// launcher). The channel is buffered: a reader that only looked may put the result back. A
// command still running when the test ends is killed then.
func Start(t testing.TB, cmd *exec.Cmd) chan Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	done, ended := make(chan Result, 1), make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(ended)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		done <- Result{out.String(), errb.String(), code}
	}()
	t.Cleanup(func() {
		select {
		case <-ended:
		default:
			cmd.Process.Kill()
			<-ended
		}
	})
	return done
}

// Timeline reads a call's timeline as JSON.
func Timeline(t testing.TB, stateDir, callID string) audit.TimelineJSON {
	t.Helper()
	r := Berm(t, nil, "timeline", "--state-dir", stateDir, "--json", callID)
	if r.Exit != 0 {
		t.Fatalf("berm timeline %s: exit %d: %s", callID, r.Exit, r.Stderr)
	}
	var tl audit.TimelineJSON
	if err := json.Unmarshal([]byte(r.Stdout), &tl); err != nil {
		t.Fatalf("timeline json: %v\n%s", err, r.Stdout)
	}
	return tl
}

// Calls lists the calls of a state dir.
func Calls(t testing.TB, stateDir string) []audit.Call {
	t.Helper()
	r := Berm(t, nil, "calls", "--state-dir", stateDir, "--json")
	if r.Exit != 0 {
		t.Fatalf("berm calls: exit %d: %s", r.Exit, r.Stderr)
	}
	var calls []audit.Call
	if err := json.Unmarshal([]byte(r.Stdout), &calls); err != nil {
		t.Fatalf("calls json: %v\n%s", err, r.Stdout)
	}
	return calls
}

// Workspace makes a workspace directory owned by the sandbox's default user (65534).
func Workspace(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	// The tool runs as 65534: every parent must be traversable.
	_ = os.Chmod(dir, 0o755)
	_ = os.Chmod(filepath.Dir(dir), 0o755)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return ws
}

// Daemon is a bermd started for one test: its own state directory, socket and metrics
// address, its log kept (and printed when the test fails); stopped with SIGINT, and waited
// for, when the test ends.
type Daemon struct {
	State, Socket, Metrics string
	Cmd                    *exec.Cmd
	Log                    *bytes.Buffer // bermd's stderr: read it once bermd has stopped
}

// StartDaemon starts bermd with its own state, socket and metrics address, and extra flags,
// and waits (a minute at most) for its socket.
func StartDaemon(t testing.TB, extra ...string) *Daemon {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := &Daemon{State: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "bermd.sock"), Metrics: addr, Log: &bytes.Buffer{}}
	args := append([]string{"--state-dir", d.State, "--socket", d.Socket, "--metrics", addr}, extra...)
	d.Cmd = exec.Command(Path(t, "bermd"), args...)
	d.Cmd.Stderr = d.Log
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Cmd.Process.Signal(os.Interrupt)
		d.Cmd.Wait()
		if t.Failed() {
			t.Logf("bermd log:\n%s", d.Log)
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(d.Socket); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("bermd did not start in a minute:\n%s", d.Log)
		}
	}
}

// Call is the ended call id of the daemon's journal, with its record.
func (d *Daemon) Call(t testing.TB, id string) audit.Call {
	t.Helper()
	for _, c := range Calls(t, d.State) {
		if c.Start.CallID == id {
			if c.Record == nil {
				t.Fatalf("call %s has no record", id)
			}
			return c
		}
	}
	t.Fatalf("call %s is not in bermd's journal", id)
	return audit.Call{}
}
