package testutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// The child's name and argument travel in the environment: flags would reach the testing
// package, which refuses ones it does not know.
const (
	childEnv = "BERM_TEST_CHILD"
	argEnv   = "BERM_TEST_CHILD_ARG"
)

// Children are what a test binary can run instead of its tests, by name. A child gets the
// argument given to Command and returns its exit status.
type Children map[string]func(arg string) int

// Main is a TestMain: it runs the tests, or, in a test binary started by Command, the child
// named there.
func Main(m *testing.M, children Children) {
	if name, ok := os.LookupEnv(childEnv); ok {
		child, found := children[name]
		if !found {
			fmt.Fprintf(os.Stderr, "testutil: this test binary has no child %q\n", name)
			os.Exit(2)
		}
		os.Exit(child(os.Getenv(argEnv)))
	}
	os.Exit(m.Run())
}

// Command is the test binary again, to run child name with arg. The caller may set what
// exec.Cmd allows (cgroup, stdio) before running it. -test.run=^$ keeps the tests from
// running a second time should the binary's TestMain not be Main.
func Command(t testing.TB, name, arg string) *exec.Cmd {
	t.Helper()
	// the executable itself, not os.Args[0]: the test may have changed directory
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("testutil: the test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+name, argEnv+"="+arg)
	return cmd
}

// JSONCommand is Command with arg encoded as JSON.
func JSONCommand(t testing.TB, name string, arg any) *exec.Cmd {
	t.Helper()
	b, err := json.Marshal(arg)
	if err != nil {
		t.Fatalf("testutil: child %s argument: %v", name, err)
	}
	return Command(t, name, string(b))
}

// RunJSON runs cmd and decodes what it wrote on stdout, JSON, into out. A child that did not
// exit 0 (killed by a signal, say) is returned as its *exec.ExitError, its stderr kept there;
// any other failure ends the test. What the child wrote on stderr is logged.
func RunJSON(t testing.TB, cmd *exec.Cmd, out any) *exec.ExitError {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("child stderr:\n%s", stderr.Bytes())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ee.Stderr = stderr.Bytes()
		return ee
	}
	if err != nil {
		t.Fatalf("testutil: run child: %v", err)
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("testutil: child output %q: %v", stdout.Bytes(), err)
	}
	return nil
}

// JSONChild is a child that decodes its argument, JSON, into an A, runs fn, and writes what
// fn returns as JSON on stdout. An argument it cannot decode ends it with status 2.
func JSONChild[A, R any](fn func(A) R) func(arg string) int {
	return func(arg string) int {
		var a A
		if err := json.Unmarshal([]byte(arg), &a); err != nil {
			fmt.Fprintf(os.Stderr, "testutil: child argument %q: %v\n", arg, err)
			return 2
		}
		if err := json.NewEncoder(os.Stdout).Encode(fn(a)); err != nil {
			fmt.Fprintf(os.Stderr, "testutil: child result: %v\n", err)
			return 2
		}
		return 0
	}
}
