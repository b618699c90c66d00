package csan

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/testutil"
)

// Exit codes the sanitizers are told to use, and the words of their reports.
const (
	asanExit  = 99
	ubsanExit = 98
)

// sanEnv makes a report end the process with a code of its own (checked) instead of an abort:
// ASan's leak check stays off, as both programs exit right after their last allocation.
var sanEnv = []string{
	"ASAN_OPTIONS=abort_on_error=0:exitcode=99:detect_leaks=0:allocator_may_return_null=1",
	"UBSAN_OPTIONS=halt_on_error=1:exitcode=98:print_stacktrace=1",
}

var reportWords = []string{"ERROR: AddressSanitizer", "runtime error:", "SUMMARY: AddressSanitizer", "SUMMARY: UndefinedBehaviorSanitizer", "ERROR: LeakSanitizer"}

var (
	buildOnce sync.Once
	built     struct {
		dir, cc string
		err     error
		missing string // no compiler here has the sanitizers: why
	}
)

// sanitized builds both C programs once per test process with ASan and UBSan (the first of
// $CC, gcc and clang that builds and runs a sanitized program) and returns the directory that
// holds berm and berm-stage. Without such a compiler the test is Unavailable: a skip with the
// reason, a failure under CI.
func sanitized(t *testing.T) string {
	t.Helper()
	testutil.Integration(t, "a C compiler with AddressSanitizer and UndefinedBehaviorSanitizer, and the programs it builds")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "berm-csan-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		var tried []string
		for _, cc := range compilers() {
			if why := probe(cc, dir); why != "" {
				tried = append(tried, cc+": "+why)
				continue
			}
			built.cc = cc
			break
		}
		if built.cc == "" {
			built.missing = "no C compiler here builds with -fsanitize=address,undefined (" + strings.Join(tried, "; ") + ")"
			return
		}
		root := bermbin.RepoRoot()
		for out, src := range map[string]string{"berm": "cmd/berm/main.c", "berm-stage": "cmd/berm-stage/main.c"} {
			cmd := exec.Command(built.cc, "-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
				"-fno-sanitize-recover=undefined", "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, out), filepath.Join(root, src))
			if b, err := cmd.CombinedOutput(); err != nil {
				built.err = errors.New(built.cc + " " + src + ": " + err.Error() + "\n" + string(b))
				return
			}
		}
	})
	if built.missing != "" {
		testutil.Unavailable(t, "%s", built.missing)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

func compilers() []string {
	var out []string
	for _, cc := range []string{os.Getenv("CC"), "gcc", "clang", "cc"} {
		if cc != "" && !contains(out, cc) {
			out = append(out, cc)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// probe builds and runs a sanitized program that does nothing: "" when cc can.
func probe(cc, dir string) string {
	if _, err := exec.LookPath(cc); err != nil {
		return "not installed"
	}
	src := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		return err.Error()
	}
	bin := filepath.Join(dir, "probe-"+filepath.Base(cc))
	if b, err := exec.Command(cc, "-fsanitize=address,undefined", "-o", bin, src).CombinedOutput(); err != nil {
		return "cannot build: " + firstLine(string(b))
	}
	if b, err := exec.Command(bin).CombinedOutput(); err != nil {
		return "its sanitized program does not run: " + firstLine(string(b))
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// result is how a sanitized program ended.
type result struct {
	status int // exit code, or 128+signal
	stdout []byte
	stderr []byte
}

// checkClean fails the test on a sanitizer report, by exit code or by its words on stderr.
func checkClean(t *testing.T, what string, r result) {
	t.Helper()
	for _, w := range reportWords {
		if bytes.Contains(r.stderr, []byte(w)) {
			t.Fatalf("%s: sanitizer report (status %d):\n%s", what, r.status, tail(r.stderr))
		}
	}
	if r.status == asanExit || r.status == ubsanExit {
		t.Fatalf("%s: exit status %d is the sanitizers':\n%s", what, r.status, tail(r.stderr))
	}
	if r.status > 128 && r.status != 128+int(syscall.SIGSYS) {
		t.Fatalf("%s: killed by signal %d:\n%s", what, r.status-128, tail(r.stderr))
	}
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// start runs path with exactly argv and env (os.StartProcess passes both as they are: no
// deduplication, entries without '=' kept), stdin from /dev/null, extra files from fd 3 on.
func start(t *testing.T, path string, argv, env []string, extra ...*os.File) (*os.Process, func() result) {
	t.Helper()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]*os.File{devnull, stdout, stderr}, extra...)
	p, err := os.StartProcess(path, argv, &os.ProcAttr{Env: env, Files: files})
	stdout.Close()
	stderr.Close()
	if err != nil {
		t.Fatalf("start %s with %d args and %d env: %v", path, len(argv), len(env), err)
	}
	return p, func() result {
		st, err := p.Wait()
		if err != nil {
			t.Fatal(err)
		}
		ws := st.Sys().(syscall.WaitStatus)
		r := result{status: ws.ExitStatus()}
		if ws.Signaled() {
			r.status = 128 + int(ws.Signal())
		}
		r.stdout, _ = os.ReadFile(filepath.Join(dir, "stdout"))
		r.stderr, _ = os.ReadFile(filepath.Join(dir, "stderr"))
		return r
	}
}

// hostileStrings are argument and environment strings that are each legal to execve.
var hostileStrings = []string{"", "=", "==", "NOEQUALS", "\xff\xfe\xfd", "\xc0\x80", "a\nb", "\x1b[2J\x1b[H", "%s%n%x", "-", "--", "--socket", "é", strings.Repeat("x", 4096)}

// hostileEnv is n entries: the sanitizers' options, then names without '=', empty ones,
// invalid UTF-8, duplicates (one long entry: n of them would pass execve's bounds).
func hostileEnv(n int) []string {
	env := append([]string{}, sanEnv...)
	for i := 0; len(env) < n; i++ {
		s := hostileStrings[i%len(hostileStrings)]
		if len(s) > 64 && i >= len(hostileStrings) {
			s = s[:64]
		}
		env = append(env, s, "DUP=1", "DUP=2")
	}
	return env
}
