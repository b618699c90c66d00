// Package secrets holds what berm knows of the brokered credentials of running calls: the
// node's fingerprint key, the forms a secret shows in (its encodings), a streaming redactor
// for a call's output and the node-wide registry of live secrets. Values stay in memory: only
// names and keyed fingerprints are ever written.
package secrets

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the node's fingerprint key, in the state dir, readable by root only.
const KeyFile = "credential-fingerprint.key"

// Fingerprinter gives a secret's keyed fingerprint: HMAC-SHA256 under the node's key, so the
// fingerprint of a low-entropy secret cannot be brute-forced by whoever reads the trail.
type Fingerprinter struct{ key []byte }

// LoadKey reads the node's key from dir, making it (32 random bytes, mode 0400) on first use.
func LoadKey(dir string) (*Fingerprinter, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fingerprint key: %w", err)
	}
	path := filepath.Join(dir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("fingerprint key: %w", err)
		}
		tmp := path + ".new"
		if err := os.WriteFile(tmp, key, 0o400); err != nil {
			return nil, fmt.Errorf("fingerprint key: %w", err)
		}
		// A key made by two processes at once: the first rename wins, both read it back.
		if err := os.Rename(tmp, path); err != nil {
			return nil, fmt.Errorf("fingerprint key: %w", err)
		}
		key, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("fingerprint key: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("fingerprint key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o400); err != nil {
			return nil, fmt.Errorf("fingerprint key %s is readable by others and cannot be fixed: %w", path, err)
		}
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("fingerprint key %s: %d bytes, expected 32", path, len(key))
	}
	return &Fingerprinter{key: key}, nil
}

// Of is the fingerprint of value: the first 128 bits of its HMAC, in hex.
func (f *Fingerprinter) Of(value []byte) string {
	m := hmac.New(sha256.New, f.key)
	m.Write(value)
	return hex.EncodeToString(m.Sum(nil))[:32]
}
