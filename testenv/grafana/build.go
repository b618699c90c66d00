package grafana

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Version is the only version of Grafana's Go module the module proxy serves (a 10.1
// pre-release; /api/health calls itself 9.2.0). Its backend builds from the module; its
// frontend is not in it, and is not needed: the tests use the HTTP API.
const Version = "v1.9.2-0.20230609164553-81d85ce8028d"

// CacheDir is where the build is kept between runs: $BERM_GRAFANA_CACHE, else
// /var/cache/berm/grafana as root, else the user's cache directory.
func CacheDir() string {
	if d := os.Getenv("BERM_GRAFANA_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/berm/grafana"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "berm", "grafana")
	}
	return filepath.Join(os.TempDir(), "berm-grafana")
}

// Home is the built Grafana's home directory (its conf/ and bin/grafana), building it when it
// is not there: go get of the module in a scratch module, wire gen, go build (minutes on two
// cores; a file lock keeps concurrent callers to one build).
func Home(ctx context.Context) (string, error) {
	home := filepath.Join(CacheDir(), "src")
	err := buildOnce("build", func() bool { return ok(home) }, func(cache string) error {
		return build(ctx, cache, home)
	})
	if err != nil {
		return "", err
	}
	return home, nil
}

// buildOnce runs build unless done says it was done, under the cache's file lock name.lock:
// concurrent callers (parallel test binaries) make one build, the others wait for it and
// find it done. What build makes must be marked done last, so a failed build is retried.
func buildOnce(name string, done func() bool, build func(cache string) error) error {
	if done() {
		return nil
	}
	cache := CacheDir()
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("grafana cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cache, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("grafana %s lock: %w", name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("grafana %s lock: %w", name, err)
	}
	if done() { // built while we waited
		return nil
	}
	return build(cache)
}

func ok(home string) bool {
	st, err := os.Stat(filepath.Join(home, "bin", "grafana"))
	if err != nil || st.Mode()&0o111 == 0 {
		return false
	}
	_, err = os.Stat(filepath.Join(home, "conf", "defaults.ini"))
	return err == nil
}

func build(ctx context.Context, cache, home string) error {
	log, err := os.Create(filepath.Join(cache, "build.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	env := append(os.Environ(), "GONOSUMDB=github.com/grafana", "GOFLAGS=-mod=mod")
	run := func(dir string, args ...string) error {
		fmt.Fprintf(log, "+ (cd %s && %s)\n", dir, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build grafana: %s: %w (log: %s)", strings.Join(args, " "), err, log.Name())
		}
		return nil
	}
	scratch := filepath.Join(cache, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(scratch, "go.mod")); errors.Is(err, os.ErrNotExist) {
		if err := run(scratch, "go", "mod", "init", "scratch"); err != nil {
			return err
		}
	}
	if err := run(scratch, "go", "get", "github.com/grafana/grafana@"+Version); err != nil {
		return err
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	src := filepath.Join(strings.TrimSpace(string(modcache)), "github.com", "grafana", "grafana@"+Version)
	tmp := home + ".tmp"
	os.RemoveAll(tmp)
	// the module cache is read-only: wire writes its generated files into a copy
	if err := run(cache, "cp", "-r", src, tmp); err != nil {
		return err
	}
	if err := run(cache, "chmod", "-R", "u+w", tmp); err != nil {
		return err
	}
	if err := run(tmp, "go", "run", "github.com/google/wire/cmd/wire@v0.7.0", "gen", "-tags", "oss", "./pkg/server", "./pkg/cmd/grafana-cli/runner"); err != nil {
		return err
	}
	if err := run(tmp, "go", "build", "-tags", "oss", "-o", "bin/grafana", "./pkg/cmd/grafana"); err != nil {
		return err
	}
	os.RemoveAll(home)
	return os.Rename(tmp, home)
}
