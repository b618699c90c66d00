package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// showTerminal attaches the tool's pty (tree: a detached mount of its device file, made by
// the launcher) at its host name in the call's /dev, which has no devpts: ttyname(3), which
// looks up the name the kernel gives the tool's stdin, then finds the tool's own pty and
// nothing else of the host's.
func showTerminal(tree int, name string) error {
	n, ok := strings.CutPrefix(name, "/dev/pts/")
	if !ok || n == "" || strings.ContainsAny(n, "/.") {
		return fmt.Errorf("pty name %q: expected /dev/pts/N", name)
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("show the call's pty: %w", err)
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("show the call's pty: %w", err)
	}
	f.Close()
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("show the call's pty at %s: %w", name, err)
	}
	return nil
}
