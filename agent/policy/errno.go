package policy

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrnoOf is the errno an error carries: 0 for none, EIO for an error that carries no errno.
// The approval supervisor answers the tool's held syscalls with it, and a compile's facts keep
// it for a path it could not read.
func ErrnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.EIO
}
