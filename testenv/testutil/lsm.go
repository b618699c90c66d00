package testutil

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

const lsmFile = "/sys/kernel/security/lsm"

// ActiveLSMs lists the Linux security modules the kernel runs (securityfs' lsm file), so a
// test can tell "this kernel has no Landlock" from "the probe is broken". Where securityfs is
// not mounted (hosts often leave it out) it is mounted in a private mount namespace of one
// thread, which needs root; the host's mounts are not touched.
func ActiveLSMs() ([]string, error) {
	b, err := os.ReadFile(lsmFile)
	if err != nil {
		b, err = readInOwnMountNS()
	}
	if err != nil {
		return nil, fmt.Errorf("active LSMs: %w", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), ","), nil
}

// HasLSM says whether the kernel runs the security module name; the error says it could not
// tell.
func HasLSM(name string) (bool, error) {
	lsms, err := ActiveLSMs()
	if err != nil {
		return false, err
	}
	return slices.Contains(lsms, name), nil
}

func readInOwnMountNS() ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result)
	go func() {
		// The thread's mount namespace is its own from here: never unlocked, the runtime
		// retires the thread when this goroutine ends.
		runtime.LockOSThread()
		b, err := func() ([]byte, error) {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return nil, fmt.Errorf("unshare mount namespace: %w", err)
			}
			// private first, so the mount below does not propagate to the host
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return nil, fmt.Errorf("make mounts private: %w", err)
			}
			if err := unix.Mount("securityfs", "/sys/kernel/security", "securityfs", 0, ""); err != nil {
				return nil, fmt.Errorf("mount securityfs: %w", err)
			}
			return os.ReadFile(lsmFile)
		}()
		done <- result{b, err}
	}()
	r := <-done
	return r.b, r.err
}
