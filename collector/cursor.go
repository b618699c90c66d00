package collector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/journal"
)

// cursorState is what the cursor file holds. Shipped is where the next batch starts: every
// record before it is acknowledged by ClickHouse. InFlight, when past Shipped, is the end of a
// batch that was sent but not acknowledged (the collector died, or ClickHouse failed mid
// insert): some of its rows may be in ClickHouse, so the records up to it are shipped again
// with the rows already there filtered out.
type cursorState struct {
	Destination string           `json:"destination"` // DSN without credentials, for people
	Shipped     journal.Position `json:"shipped"`
	InFlight    journal.Position `json:"in_flight"`
}

// cursor is the durable, per (journal, destination) cursor. It also holds an exclusive lock,
// so that bermd and a standalone berm-collector never ship one journal to one place at once.
type cursor struct {
	path  string
	lock  *os.File
	state cursorState
}

// redactDSN drops the password, which must not land on disk, and so does not change the
// cursor's identity when rotated.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	q.Del("password")
	u.RawQuery = q.Encode()
	return u.String()
}

func cursorPath(stateDir, dsn string) string {
	sum := sha256.Sum256([]byte(redactDSN(dsn)))
	return filepath.Join(stateDir, "collector", hex.EncodeToString(sum[:8])+".cursor")
}

func openCursor(stateDir, dsn string) (*cursor, error) {
	p := cursorPath(stateDir, dsn)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("create cursor dir: %w", err)
	}
	lock, err := os.OpenFile(p+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open cursor lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another collector ships %s to %s (lock %s held)", stateDir, redactDSN(dsn), p+".lock")
		}
		return nil, fmt.Errorf("lock cursor %s: %w", p, err)
	}
	c := &cursor{path: p, lock: lock, state: cursorState{Destination: redactDSN(dsn)}}
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, nil
	case err != nil:
		lock.Close()
		return nil, fmt.Errorf("read cursor %s: %w", p, err)
	}
	if err := json.Unmarshal(b, &c.state); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cursor %s is damaged (%v); move it away to reship the whole journal", p, err)
	}
	c.state.Destination = redactDSN(dsn)
	return c, nil
}

// save writes the state atomically: temp file, fsync, rename, fsync of the directory.
func (c *cursor) save(st cursorState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode cursor: %w", err)
	}
	tmp := c.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write cursor: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write cursor: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync cursor: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close cursor: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("replace cursor: %w", err)
	}
	if d, err := os.Open(filepath.Dir(c.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	c.state = st
	return nil
}

func (c *cursor) close() error { return c.lock.Close() }

// RedactDSN is a DSN as berm prints it: without its password.
func RedactDSN(dsn string) string { return redactDSN(dsn) }
