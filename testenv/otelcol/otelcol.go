// Package otelcol builds and runs a real OpenTelemetry Collector for the tests: built from its Go
// modules by go.opentelemetry.io/collector/cmd/builder with manifest.yaml (the OTLP receiver and
// contrib's file exporter), cached by the manifest's hash, started on loopback with a
// configuration that writes what it receives to a file as OTLP JSON lines.
package otelcol

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/testutil"
)

//go:embed manifest.yaml
var manifest []byte

// BuilderVersion is the collector builder's module version; the manifest's components match it.
const BuilderVersion = "v0.165.0"

// CacheDir is where builds are kept: $BERM_OTELCOL_CACHE, else /var/cache/berm/otelcol as root,
// else the user's cache directory.
func CacheDir() string {
	if d := os.Getenv("BERM_OTELCOL_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/berm/otelcol"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "berm", "otelcol")
	}
	return filepath.Join(os.TempDir(), "berm-otelcol")
}

// key names a build: the manifest, the builder and the Go toolchain.
func key() string {
	h := sha256.New()
	h.Write(manifest)
	h.Write([]byte(BuilderVersion + runtime.Version()))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Binary is the built collector, building it when it is not in the cache (minutes on two
// cores; a file lock keeps concurrent callers to one build).
func Binary(ctx context.Context) (string, error) {
	dir := filepath.Join(CacheDir(), key())
	bin := filepath.Join(dir, "otelcol-berm")
	if executable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("otelcol cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("otelcol build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("otelcol build lock: %w", err)
	}
	if executable(bin) { // built while we waited
		return bin, nil
	}
	if err := build(ctx, dir, bin); err != nil {
		return "", err
	}
	return bin, nil
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// build runs the builder to generate the collector's sources, then resolves and compiles them
// itself: the builder's own `go mod tidy` fails, because tidy wants a test dependency of the
// file exporter (contrib's otlpencodingextension) that the module proxy does not serve;
// `go mod tidy -e` goes on without it (nothing the build compiles imports it).
func build(ctx context.Context, dir, bin string) error {
	log, err := os.Create(filepath.Join(dir, "build.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	run := func(wd string, env []string, args ...string) error {
		fmt.Fprintf(log, "+ (cd %s && %s)\n", wd, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = wd, append(os.Environ(), env...), log, log
		if err := cmd.Run(); err != nil {
			return &BuildError{Step: strings.Join(args, " "), Err: err, Log: log.Name()}
		}
		return nil
	}
	src := filepath.Join(dir, "src")
	os.RemoveAll(src)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	m := bytes.Replace(manifest, []byte("dist:\n"), []byte("dist:\n  output_path: "+src+"\n"), 1)
	if err := os.WriteFile(filepath.Join(dir, "manifest.yaml"), m, 0o644); err != nil {
		return err
	}
	gobin := filepath.Join(dir, "bin")
	if err := run(dir, []string{"GOBIN=" + gobin}, "go", "install", "go.opentelemetry.io/collector/cmd/builder@"+BuilderVersion); err != nil {
		return err
	}
	if err := run(dir, nil, filepath.Join(gobin, "builder"), "--config", filepath.Join(dir, "manifest.yaml"), "--skip-compilation", "--skip-get-modules"); err != nil {
		return err
	}
	mods, err := gomods(manifest)
	if err != nil {
		return err
	}
	if err := run(src, nil, "go", "mod", "init", "otelcol-berm"); err != nil {
		return err
	}
	if err := run(src, nil, append([]string{"go", "get"}, mods...)...); err != nil {
		return err
	}
	if err := run(src, nil, "go", "mod", "tidy", "-e"); err != nil {
		return err
	}
	tmp := bin + ".tmp"
	if err := run(src, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", tmp, "."); err != nil {
		return err
	}
	return os.Rename(tmp, bin)
}

// gomods are the manifest's components as module@version.
func gomods(m []byte) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(bytes.NewReader(m))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "- gomod:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, fmt.Errorf("otelcol manifest: %q: expected module and version", line)
			}
			mods = append(mods, f[0]+"@"+f[1])
		}
	}
	if len(mods) == 0 {
		return nil, errors.New("otelcol manifest: no gomod lines")
	}
	return mods, nil
}

// BuildError is a failed build step, with its log.
type BuildError struct {
	Step string
	Err  error
	Log  string
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("build otelcol: %s: %v (log: %s)", e.Step, e.Err, e.Log)
}

// Offline says whether the build failed for want of the network (the module proxy unreachable).
func (e *BuildError) Offline() bool {
	b, _ := os.ReadFile(e.Log)
	for _, s := range []string{"dial tcp", "no such host", "network is unreachable", "connection refused", "i/o timeout", "TLS handshake timeout"} {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// Collector is a running collector: OTLP on GRPC and HTTP (loopback), everything it receives
// written to File as OTLP JSON, one request per line.
type Collector struct {
	GRPC, HTTP string // HOST:PORT of the receivers
	File       string
	bin, dir   string
	proc       *testutil.Proc
}

// Start starts a collector writing to dir/otlp.json.
func Start(ctx context.Context, dir string) (*Collector, error) {
	bin, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	c := &Collector{bin: bin, dir: dir, File: filepath.Join(dir, "otlp.json"), GRPC: freeAddr(), HTTP: freeAddr()}
	return c, c.Up(ctx)
}

// Up starts the collector again (after Down) on the same ports and file.
func (c *Collector) Up(ctx context.Context) error {
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    format: json
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
    logs:
      receivers: [otlp]
      exporters: [file]
`, c.GRPC, c.HTTP, c.File)
	path := filepath.Join(c.dir, "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	ready := func() int {
		b, _ := os.ReadFile(c.logPath())
		return bytes.Count(b, []byte("Everything is ready"))
	}
	before := ready() // each Up appends to the same log: wait for one more readiness line
	p, err := testutil.StartProc(exec.Command(c.bin, "--config", path), c.logPath())
	if err != nil {
		return err
	}
	c.proc = p
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = p.WaitReady(ctx, "otelcol", 50*time.Millisecond, func() bool { return ready() > before }, func() string { return testutil.LogTail(c.logPath()) })
	if err != nil {
		c.Down()
		return err
	}
	return nil
}

func (c *Collector) logPath() string { return filepath.Join(c.dir, "otelcol.log") }

// Down stops the collector (SIGTERM: it flushes the file).
func (c *Collector) Down() {
	if c.proc == nil {
		return
	}
	c.proc.Stop(syscall.SIGTERM, 10*time.Second)
	c.proc = nil
}

// Stall stops the collector's process where it is (SIGSTOP): its sockets stay open and take
// what the kernel buffers, nothing is answered, until Resume. A collector that stalls, not one
// that is down.
func (c *Collector) Stall() error { return c.proc.Cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a stalled collector run again (SIGCONT).
func (c *Collector) Resume() error { return c.proc.Cmd.Process.Signal(syscall.SIGCONT) }

// Log is the end of the collector's log, for failure messages.
func (c *Collector) Log() string { return testutil.LogTail(c.logPath()) }

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ForTest starts a collector for t and stops it when t ends. When the collector cannot be
// built for want of the network, the test is skipped with the reason (and fails under
// CI=true); any other failure fails it.
func ForTest(t testing.TB) *Collector {
	t.Helper()
	testutil.Integration(t, "a real OpenTelemetry Collector")
	// 20 minutes: the first use builds the collector.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := Start(ctx, t.TempDir())
	var be *BuildError
	if errors.As(err, &be) && be.Offline() && os.Getenv("CI") != "true" {
		t.Skipf("the OpenTelemetry Collector could not be built, the module proxy is unreachable (offline?): %v", err)
	}
	if err != nil {
		t.Fatalf("start otelcol: %v", err)
	}
	t.Cleanup(c.Down)
	return c
}
