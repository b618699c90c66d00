package sandboxer

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Every sandbox runs its tool as a host uid and gid of its own, taken from a subordinate range
// as /etc/subuid and /etc/subgid describe them: the entry of the user "berm" when there is one
// (e.g. `berm:2000000000:1000000` in both files), otherwise defaultIDBase with defaultIDCount
// ids. Such ids own nothing on the host: a call's processes, memory and per-uid kernel
// resources (inotify instances, pipe buffers) are its own, and no host user but root reaches
// them.
const (
	defaultIDBase  = 2000000000
	defaultIDCount = 1 << 20
	subIDUser      = "berm"
	// idLockFile holds one byte-range lock per id in use: open file description locks go away
	// with the process that holds them, so a bermd restart (or a crash) frees its ids and two
	// launchers on one host never take the same one.
	idLockFile = "/run/berm/ids.lock"
)

// hostIDs is one sandbox's host uid and gid, held until released.
type hostIDs struct {
	UID, GID uint32
	slot     int64
}

type idRange struct{ uidBase, gidBase, count uint32 }

// idAllocator hands out ids of its range, one slot per sandbox.
type idAllocator struct {
	r    idRange
	once sync.Once
	lock *os.File
	err  error
	// held are this process's slots: its locks all belong to one open file description, which
	// never conflicts with itself.
	mu   sync.Mutex
	held map[int64]bool
}

var ids = &idAllocator{}

// subIDRange reads name's first range from a subuid/subgid file.
func subIDRange(path, name string) (base, count uint32, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || parts[0] != name {
			continue
		}
		b, err1 := strconv.ParseUint(parts[1], 10, 32)
		c, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 != nil || err2 != nil || c == 0 {
			continue
		}
		return uint32(b), uint32(c), true
	}
	return 0, 0, false
}

// configuredRange is the berm entry of /etc/subuid and /etc/subgid, or the default range.
func configuredRange() (idRange, error) {
	ub, uc, uok := subIDRange("/etc/subuid", subIDUser)
	gb, gc, gok := subIDRange("/etc/subgid", subIDUser)
	r := idRange{uidBase: defaultIDBase, gidBase: defaultIDBase, count: defaultIDCount}
	if uok != gok {
		return r, errors.New("/etc/subuid and /etc/subgid must both have a berm entry, or neither")
	}
	if uok {
		r = idRange{uidBase: ub, gidBase: gb, count: min(uc, gc)}
	}
	return r, r.validate()
}

// validate refuses a range that holds an id with a meaning on the host: root, nobody, or
// the (uint32) -1 that setuid calls read as "unchanged".
func (r idRange) validate() error {
	for _, b := range []uint32{r.uidBase, r.gidBase} {
		end := uint64(b) + uint64(r.count) // exclusive
		if b <= 65534 || end > 0xFFFFFFFF {
			return fmt.Errorf("subordinate id range %d+%d must lie within 65535..4294967294 (never root, nobody or -1)", b, r.count)
		}
	}
	return nil
}

func (a *idAllocator) init() {
	if a.r, a.err = configuredRange(); a.err != nil {
		return
	}
	if a.err = os.MkdirAll(filepath.Dir(idLockFile), 0o711); a.err != nil {
		return
	}
	a.held = map[int64]bool{}
	a.lock, a.err = os.OpenFile(idLockFile, os.O_RDWR|os.O_CREATE, 0o600)
}

// take reserves a free slot: a random start, then the next free one.
func (a *idAllocator) take() (*hostIDs, error) {
	a.once.Do(a.init)
	if a.err != nil {
		return nil, fmt.Errorf("host ids: %w", a.err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	a.mu.Lock()
	defer a.mu.Unlock()
	start := int64(binary.LittleEndian.Uint64(b[:]) % uint64(a.r.count))
	for i := int64(0); i < int64(a.r.count); i++ {
		slot := (start + i) % int64(a.r.count)
		if a.held[slot] {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: slot, Len: 1}
		err := unix.FcntlFlock(a.lock.Fd(), unix.F_OFD_SETLK, &lk)
		if err == unix.EAGAIN || err == unix.EACCES {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("host ids: lock %s: %w", idLockFile, err)
		}
		a.held[slot] = true
		return &hostIDs{UID: a.r.uidBase + uint32(slot), GID: a.r.gidBase + uint32(slot), slot: slot}, nil
	}
	return nil, fmt.Errorf("host ids: all %d ids of the range are in use", a.r.count)
}

// release frees a slot once nothing of its sandbox runs any more.
func (a *idAllocator) release(h *hostIDs) {
	if h == nil || a.lock == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	lk := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: h.slot, Len: 1}
	_ = unix.FcntlFlock(a.lock.Fd(), unix.F_OFD_SETLK, &lk)
	delete(a.held, h.slot)
}
