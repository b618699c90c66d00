package testutil

import (
	"fmt"
	"os"
	"testing"
)

// RequireKernelEnv, set to 1, makes every kernel test run or fail: a reason to skip does not
// apply where the machine is known to have what the tests need (CI runs as root on it).
const RequireKernelEnv = "BERM_REQUIRE_KERNEL_TESTS"

// Required says whether kernel tests must run here: in CI (CI=true) or when
// BERM_REQUIRE_KERNEL_TESTS=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv(RequireKernelEnv) == "1"
}

// Unavailable ends a test that cannot run here: a skip with the reason, or a failure where
// kernel tests are required, since there the reason is a broken machine or a broken probe.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (kernel tests are required here: CI=true or %s=1)", msg, RequireKernelEnv)
	}
	t.Skip(msg)
}

// Integration skips, under -short, a test that needs more than the Go process: root, a kernel
// feature, a real server. -short runs the pure-logic tests only (make test runs them a second
// time with -race); the full run covers the rest. what says what the test needs.
func Integration(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short runs pure logic only; this test needs %s", what)
	}
}

// RequireRoot ends a test that needs root when it is not root (see Unavailable); why says
// what root is needed for. It is an Integration test.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	Integration(t, "root: "+why)
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root: %s; run `sudo make test`", why)
	}
}
