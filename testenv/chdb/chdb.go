// Package chdb runs SQL on a modern ClickHouse engine in process: npm's chdb package, whose
// @chdb/lib-linux-x64-gnu ships libchdb.so (ClickHouse 26.x), driven by node. It is what proves
// the modern dialect's SQL on a modern engine on a machine whose clickhouse-server is Debian's
// 18.16. The package is installed once with npm into CacheDir.
package chdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/testutil"
)

// Version is the npm chdb package the harness installs.
const Version = "3.4.0"

// CacheDir holds node_modules/chdb (BERM_CHDB_CACHE, default /var/cache/berm/chdb).
func CacheDir() string {
	if d := os.Getenv("BERM_CHDB_CACHE"); d != "" {
		return d
	}
	return "/var/cache/berm/chdb"
}

// Install installs npm's chdb into CacheDir once (under a lock) and gives the directory node
// resolves it from.
func Install(ctx context.Context) (string, error) {
	dir := CacheDir()
	ready := func() bool {
		_, err := os.Stat(filepath.Join(dir, "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so"))
		return err == nil
	}
	if ready() {
		return dir, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("chdb: npm is not installed: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if ready() {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "chdb@"+Version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install chdb@%s: %w: %s", Version, err, out)
	}
	if !ready() {
		return "", fmt.Errorf("npm install chdb@%s: no libchdb.so for this platform", Version)
	}
	return dir, nil
}

// runner reads a JSON array of statements on stdin, runs them one after another in one chdb
// session (a data directory of its own), and writes a JSON array of results: the output in
// the statement's format, or the engine's error. It goes on after an error.
const runner = `
const { Session } = require("chdb");
let input = "";
process.stdin.on("data", d => input += d);
process.stdin.on("end", () => {
  const s = new Session(process.argv[2]);
  const out = [];
  for (const q of JSON.parse(input)) {
    try { out.push({ out: String(s.query(q, "JSONEachRow")) }); }
    catch (e) { out.push({ err: String(e.message) }); }
  }
  if (s.cleanup) s.cleanup();
  process.stdout.write(JSON.stringify(out));
});
`

// Result is one statement's: the rows as JSON lines, or the engine's error.
type Result struct {
	Out string `json:"out"`
	Err string `json:"err"`
}

// Engine is a chdb data directory statements run against.
type Engine struct {
	modules, dir string
}

// New gives an engine on a data directory of its own.
func New(ctx context.Context, dir string) (*Engine, error) {
	modules, err := Install(ctx)
	if err != nil {
		return nil, err
	}
	return &Engine{modules: modules, dir: dir}, nil
}

// Run runs the statements in order, in one session, each with its result.
func (e *Engine) Run(ctx context.Context, stmts []string) ([]Result, error) {
	in, err := json.Marshal(stmts)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", "-e", runner, e.dir)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(e.modules, "node_modules"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("chdb runner: %w: %s", err, stderr.String())
	}
	var res []Result
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("chdb runner's answer: %w: %.500s", err, out)
	}
	if len(res) != len(stmts) {
		return nil, fmt.Errorf("chdb runner: %d results for %d statements", len(res), len(stmts))
	}
	return res, nil
}

// ForTest gives an engine for t. Without npm or the registry the test is skipped with the
// reason, and fails under CI=true.
func ForTest(t testing.TB) *Engine {
	t.Helper()
	testutil.Integration(t, "chdb (a modern ClickHouse engine from npm)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	e, err := New(ctx, t.TempDir())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			t.Skipf("chdb cannot be installed here: %v", err)
		}
		t.Fatal(err)
	}
	return e
}
