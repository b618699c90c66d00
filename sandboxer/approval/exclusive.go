package approval

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ErrServed is a refusal to serve an API socket another live process serves.
var ErrServed = errors.New("another live process serves this approval API socket")

// ServeExclusive is Serve for a process that must be the only one serving name in dir (a
// bermd: its socket's name derives from its control socket). It holds dir/name.lock (flock)
// from before the socket is made until after it is removed, so that a second process given
// the same name refuses to start, with ErrServed, instead of replacing the first's socket
// and deleting it at its exit. wait bounds how long it waits for the lock's holder to leave
// (a bermd exiting idle while its successor starts); a socket that answers a connection
// while nobody holds the lock (a process that does not take it) is refused too.
func ServeExclusive(b *Broker, token, dir, name string, wait time.Duration) (string, func() error, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, name+".sock")
	lockPath := filepath.Join(dir, name+".lock")
	fd, err := lockFile(lockPath, time.Now().Add(wait))
	if err == unix.EWOULDBLOCK {
		return "", nil, fmt.Errorf("approval API %s (lock %s held): %w", sock, lockPath, ErrServed)
	}
	if err != nil {
		return "", nil, fmt.Errorf("approval API lock %s: %w", lockPath, err)
	}
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		unix.Close(fd)
		return "", nil, fmt.Errorf("approval API %s answers: %w", sock, ErrServed)
	}
	s, stop, err := Serve(b, token, dir, name)
	if err != nil {
		unix.Close(fd)
		return "", nil, err
	}
	return s, func() error {
		err := stop() // the socket goes before the lock: a successor never sees ours
		_ = os.Remove(lockPath)
		unix.Close(fd)
		return err
	}, nil
}

// lockFile takes path's flock, waiting until deadline for its holder, and makes sure the lock
// is on the file path names (its holder removes it at its exit: a lock on the removed file
// would be nobody's).
func lockFile(path string, deadline time.Time) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, err
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			var held, named unix.Stat_t
			if unix.Fstat(fd, &held) == nil && unix.Stat(path, &named) == nil && held.Dev == named.Dev && held.Ino == named.Ino {
				return fd, nil
			}
			unix.Close(fd) // removed by its last holder meanwhile: take the new one
			continue
		}
		unix.Close(fd)
		if err != unix.EWOULDBLOCK || time.Now().After(deadline) {
			return -1, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
