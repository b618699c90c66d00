// Package npmci installs a test's locked npm packages once per lock file into a cache kept
// between runs: the tests that run real JavaScript (the datasource's module.js against
// Grafana's packages, the dashboards' browser tests through puppeteer-core).
package npmci

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Packages names a directory holding package.json and package-lock.json.
type Packages struct {
	// Dir holds package.json and package-lock.json (relative to the test's directory).
	Dir string
	// Name names the cache: $CacheEnv, else /var/cache/berm/Name as root, else the user's
	// cache directory's berm/Name.
	Name, CacheEnv string
	// Env is added to npm's environment (e.g. PUPPETEER_SKIP_DOWNLOAD=1).
	Env []string
}

// Cache is the directory p's installs are kept in, one per lock file.
func (p Packages) Cache() string {
	if d := os.Getenv(p.CacheEnv); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return filepath.Join("/var/cache/berm", p.Name)
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "berm", p.Name)
	}
	return filepath.Join(os.TempDir(), "berm-"+p.Name)
}

// Install runs `npm ci` of p once per lock file and gives the directory whose node_modules
// holds the packages. A file lock keeps concurrent test binaries to one install; the marker
// is written only after npm ci succeeded, so a failed install is retried. The lock is then
// held shared until the test ends, so that another worktree's install, which removes older
// installs, waits for the tests using one. No package's install script runs
// (--ignore-scripts): none is needed to load them, and none downloads anything.
func Install(t *testing.T, npm string, p Packages) string {
	t.Helper()
	pkg, err := os.ReadFile(filepath.Join(p.Dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(p.Dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock) // the lock names every package and version, the root's too
	root := p.Cache()
	dir := filepath.Join(root, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("%s cache: %v", p.Name, err)
	}
	lf, err := os.OpenFile(filepath.Join(root, "install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("%s cache lock: %v", p.Name, err)
	}
	t.Cleanup(func() { lf.Close() })
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("%s cache lock: %v", p.Name, err)
	}
	defer func() {
		if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_SH); err != nil {
			t.Fatalf("%s cache lock: %v", p.Name, err)
		}
	}()
	marker := filepath.Join(dir, "installed")
	if _, err := os.Stat(marker); err == nil {
		return dir
	}
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), p.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	t.Logf("npm ci of %s into %s took %v", p.Dir, dir, time.Since(start).Round(time.Second))
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// an older lock file's install is hundreds of MB nothing reads any more
	old, _ := filepath.Glob(filepath.Join(root, "*", "installed"))
	for _, m := range old {
		if d := filepath.Dir(m); d != dir {
			if err := os.RemoveAll(d); err != nil {
				t.Logf("%s cache: removing %s: %v", p.Name, d, err)
			}
		}
	}
	return dir
}
