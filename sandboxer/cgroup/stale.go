package cgroup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// LockDir holds one lock file per running call, flocked by its launcher for the call's life.
// A lock nobody holds belongs to a launcher that died (SIGKILL leaves no time to clean up):
// its call's cgroups are stale.
var LockDir = "/run/berm/calls"

// Lease is a launcher's claim on its call's cgroups.
type Lease struct {
	f    *os.File
	path string
}

type leaseInfo struct {
	V2 string            `json:"v2"`
	V1 map[string]string `json:"v1"`
}

// TakeLease records the call's cgroups and holds the record for as long as the launcher lives.
func (cg *Cgroup) TakeLease(tenant, callID string) (*Lease, error) {
	dir := filepath.Join(LockDir, tenant)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lease dir: %w", err)
	}
	// Locked and written under a temporary name, then renamed: a reaper never sees a lease
	// that is not held yet.
	final := filepath.Join(dir, callID+".lock")
	f, err := os.CreateTemp(dir, callID+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	fail := func(err error) (*Lease, error) {
		os.Remove(f.Name())
		f.Close()
		return nil, fmt.Errorf("lease of call %s: %w", callID, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(err)
	}
	if err := json.NewEncoder(f).Encode(leaseInfo{V2: cg.V2, V1: cg.V1}); err != nil {
		return fail(err)
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return fail(err)
	}
	return &Lease{f: f, path: final}, nil
}

// Release drops the lease after the call's cgroups are gone.
func (l *Lease) Release() {
	os.Remove(l.path)
	l.f.Close()
}

// ReapStale removes the cgroups of calls whose launcher died, killing whatever of them is
// still running (nothing of a call may outlive the process that answers for it). It returns
// the directories it removed.
func ReapStale() ([]string, error) {
	locks, err := filepath.Glob(filepath.Join(LockDir, "*", "*.lock"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, lock := range locks {
		f, err := os.OpenFile(lock, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close() // held: the call is alive
			continue
		}
		var info leaseInfo
		if err := json.NewDecoder(f).Decode(&info); err == nil && info.V2 != "" {
			cg := &Cgroup{V2: info.V2, V1: info.V1}
			if _, err := os.Stat(info.V2); err == nil {
				if err := KillAndWait(info.V2, 5*time.Second); err != nil {
					errs = append(errs, err)
					f.Close()
					continue
				}
			}
			if err := cg.Remove(); err != nil {
				errs = append(errs, err)
				f.Close()
				continue
			}
			removed = append(removed, info.V2)
		}
		os.Remove(lock)
		f.Close()
	}
	return removed, errors.Join(errs...)
}
