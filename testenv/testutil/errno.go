package testutil

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrnoName is how children report an operation's outcome: "" for success, the errno's name
// (EACCES, EPERM) when the kernel refused, else the error's text.
func ErrnoName(err error) string {
	if err == nil {
		return ""
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}
