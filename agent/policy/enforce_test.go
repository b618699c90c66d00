package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/policy/seccomp"
	"github.com/bermsec/berm/testenv/testutil"
)

// The end-to-end test applies a compiled strict policy in a re-executed child, the way the
// launcher will, and checks what the kernel then allows: the compiled form must be loadable
// as is (file rules on device nodes, rights of the probed ABI) and mean what the policy says.
const enforceChildName = "enforce"

type enforceSpec struct {
	Workspace, Tmp string
	Ops            [][2]string // kind, path
}

type enforceResult struct {
	Errs []string // per op: "" or the errno name
	Err  string   // setup failure
}

func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Children{enforceChildName: testutil.JSONChild(enforceChild)})
}

func enforceChild(spec enforceSpec) (out enforceResult) {
	abi, err := landlock.Probe()
	if err != nil {
		out.Err = err.Error()
		return
	}
	c, err := Strict().Compile(CompileEnv{Workspace: spec.Workspace, Tmp: spec.Tmp, LandlockABI: abi})
	if err != nil {
		out.Err = err.Error()
		return
	}
	runtime.LockOSThread() // restricted for good; dies with the process
	if err := landlock.Restrict(c.Landlock); err != nil {
		out.Err = err.Error()
		return
	}
	if err := seccomp.Install(c.Seccomp, seccomp.TSync); err != nil {
		out.Err = err.Error()
		return
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
		out.Errs = append(out.Errs, testutil.ErrnoName(err))
	}
	return
}

func TestStrictEnforced(t *testing.T) {
	if _, err := landlock.Probe(); err != nil {
		testutil.Unavailable(t, "landlock unavailable: %v", err)
	}
	testutil.RequireRoot(t, "the denials checked here would partly be file modes otherwise")
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
	var out enforceResult
	if ee := testutil.RunJSON(t, testutil.JSONCommand(t, enforceChildName, spec), &out); ee != nil {
		t.Fatalf("child: %v", ee)
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
