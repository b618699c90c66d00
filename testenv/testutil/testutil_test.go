package testutil

import (
	"encoding/json"
	"os"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) {
	Main(m, Children{
		"echo": func(arg string) int { // the argument back, as JSON
			_ = json.NewEncoder(os.Stdout).Encode(arg)
			return 0
		},
		"exit3": func(string) int {
			os.Stderr.WriteString("exiting 3")
			return 3
		},
		"kill": func(string) int {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		},
	})
}

func TestChild(t *testing.T) {
	for _, tc := range []struct {
		name, arg  string
		exit       int
		signal     syscall.Signal
		stderr     string
		wantOutput bool
	}{
		{name: "echo", arg: "a\nb c", wantOutput: true},
		{name: "exit3", exit: 3, stderr: "exiting 3"},
		{name: "kill", exit: -1, signal: syscall.SIGKILL},
		{name: "no-such-child", exit: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			ee := RunJSON(t, Command(t, tc.name, tc.arg), &got)
			if tc.wantOutput {
				if ee != nil || got != tc.arg {
					t.Fatalf("got %q, %v; want %q back", got, ee, tc.arg)
				}
				return
			}
			if ee == nil {
				t.Fatal("the child's failure was not returned")
			}
			if ee.ExitCode() != tc.exit {
				t.Errorf("exit %d, want %d", ee.ExitCode(), tc.exit)
			}
			if ws := ee.Sys().(syscall.WaitStatus); tc.signal != 0 && (!ws.Signaled() || ws.Signal() != tc.signal) {
				t.Errorf("ended with %v, want %v", ee, tc.signal)
			}
			if tc.stderr != "" && string(ee.Stderr) != tc.stderr {
				t.Errorf("stderr %q, want %q", ee.Stderr, tc.stderr)
			}
		})
	}
}

// recorder is a testing.TB that notes how a test was ended instead of ending it.
type recorder struct {
	testing.TB
	ended string
}

type ended struct{}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.ended = "fail"; panic(ended{}) }
func (r *recorder) Skip(...any)           { r.ended = "skip"; panic(ended{}) }
func (r *recorder) Skipf(string, ...any)  { r.ended = "skip"; panic(ended{}) }
func (r *recorder) run(f func(testing.TB)) string {
	defer func() {
		if p := recover(); p != nil && p != (ended{}) {
			panic(p)
		}
	}()
	f(r)
	return r.ended
}

// A missing feature skips a test, except where kernel tests are required: there it fails.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		ci, require, want string
	}{
		{"", "", "skip"},
		{"true", "", "fail"},
		{"", "1", "fail"},
		{"false", "0", "skip"},
	} {
		t.Setenv("CI", tc.ci)
		t.Setenv(RequireKernelEnv, tc.require)
		r := &recorder{TB: t}
		r.run(func(tb testing.TB) { Unavailable(tb, "no %s here", "feature") })
		if r.ended != tc.want {
			t.Errorf("CI=%q %s=%q: %s, want %s", tc.ci, RequireKernelEnv, tc.require, r.ended, tc.want)
		}
	}
}

// The test process runs as root in make test and CI; a root test must then go on.
func TestRequireRootAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("checks the root branch")
	}
	r := &recorder{TB: t}
	r.run(func(tb testing.TB) { RequireRoot(tb, "a test") })
	want := ""
	if testing.Short() {
		want = "skip"
	}
	if r.ended != want {
		t.Fatalf("as root: %q, want %q", r.ended, want)
	}
}

// Landlock and seccomp tests rely on this list to tell a kernel without the module from a
// broken probe; capability is always among the active LSMs.
func TestActiveLSMs(t *testing.T) {
	lsms, err := ActiveLSMs()
	if err != nil {
		RequireRoot(t, "securityfs is not mounted here; mounting it in a private namespace")
		t.Fatal(err)
	}
	if has, _ := HasLSM("capability"); !has {
		t.Fatalf("active LSMs %v lack capability", lsms)
	}
	t.Logf("active LSMs: %v", lsms)
}
