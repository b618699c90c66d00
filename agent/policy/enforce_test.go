package policy

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// The end-to-end test applies a compiled strict policy in a re-executed child, the way the
// launcher will, and checks what the kernel then allows: the compiled form must be loadable
// as is (file rules on device nodes, rights of the probed ABI) and mean what the policy says.
const enforceEnv = "BERM_POLICY_TEST_CHILD"

type enforceSpec struct {
	Workspace, Tmp string
	Ops            [][2]string // kind, path
}

func TestMain(m *testing.M) {
	if s := os.Getenv(enforceEnv); s != "" {
		os.Exit(enforceChild(s))
	}
	os.Exit(m.Run())
}

func enforceChild(s string) int {
	var spec enforceSpec
	var out struct {
		Errs []string
		Err  string
	}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(out) }()
	if err := json.Unmarshal([]byte(s), &spec); err != nil {
		out.Err = err.Error()
		return 0
	}
	abi, err := landlock.Probe()
	if err != nil {
		out.Err = err.Error()
		return 0
	}
	c, err := Strict().Compile(CompileEnv{Workspace: spec.Workspace, Tmp: spec.Tmp, LandlockABI: abi})
	if err != nil {
		out.Err = err.Error()
		return 0
	}
	runtime.LockOSThread() // restricted for good; dies with the process
	if err := landlock.Restrict(c.Landlock); err != nil {
		out.Err = err.Error()
		return 0
	}
	if err := seccomp.Install(c.Seccomp, seccomp.TSync); err != nil {
		out.Err = err.Error()
		return 0
	}
	for _, op := range spec.Ops {
		var err error
		switch op[0] {
		case "read":
			_, err = os.ReadFile(op[1])
		case "write":
			err = os.WriteFile(op[1], []byte("x"), 0o644)
		case "exec":
			err = exec.Command(op[1]).Run()
		case "unshare":
			_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
			if e != 0 {
				err = e
			}
		}
		name := ""
		var errno unix.Errno
		if errors.As(err, &errno) {
			name = unix.ErrnoName(errno)
		} else if err != nil {
			name = err.Error()
		}
		out.Errs = append(out.Errs, name)
	}
	return 0
}

func TestStrictEnforced(t *testing.T) {
	if _, err := landlock.Probe(); err != nil {
		t.Skipf("landlock unavailable: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the denials checked here would partly be file modes otherwise")
	}
	ws, tmp := t.TempDir(), t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o644)
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	data, _ := os.ReadFile(truePath)
	os.WriteFile(filepath.Join(ws, "true"), data, 0o755)
	cases := []struct {
		kind, path, want string
	}{
		{"write", filepath.Join(ws, "out"), ""},
		{"write", filepath.Join(tmp, "out"), ""},
		{"read", "/etc/passwd", ""},
		{"read", "/etc/shadow", "EACCES"},
		{"read", secret, "EACCES"}, // the test's own temp dirs are under no grant
		{"write", "/etc/berm-policy-test", "EACCES"},
		{"exec", truePath, ""},
		{"exec", filepath.Join(ws, "true"), "EACCES"},
		{"unshare", "", "EPERM"},
	}
	spec := enforceSpec{Workspace: ws, Tmp: tmp}
	for _, c := range cases {
		spec.Ops = append(spec.Ops, [2]string{c.kind, c.path})
	}
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), enforceEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var out struct {
		Errs []string
		Err  string
	}
	if err := json.Unmarshal(outb, &out); err != nil {
		t.Fatalf("child output %q: %v", outb, err)
	}
	if out.Err != "" {
		t.Fatalf("child: %s", out.Err)
	}
	for i, c := range cases {
		if out.Errs[i] != c.want {
			t.Errorf("%s %s: got %q, want %q", c.kind, c.path, out.Errs[i], c.want)
		}
	}
}
