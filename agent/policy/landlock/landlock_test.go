package landlock

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

// The kernel tests re-execute the test binary: Landlock confines a thread for good, so each
// case runs in a child process that restricts itself, tries operations and reports the errnos.
const childName = "landlock"

type op struct {
	Kind string // read, write, exec, connect
	Path string
	Port int
}

type childSpec struct {
	Rules   Ruleset
	Listen  []int // TCP ports on 127.0.0.1 to listen on before restricting (0: pick one)
	Ops     []op
	NoApply bool // control run: same operations without Landlock
}

type childResult struct {
	Errs []string // "" for success, else the errno name
	Err  string   // setup or restrict failure
}

func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Children{childName: testutil.JSONChild(runChild)})
}

func runChild(spec childSpec) (res childResult) {
	runtime.LockOSThread() // never unlocked: the restricted thread dies with the process
	ports := map[int]int{}
	for _, p := range spec.Listen {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			res.Err = err.Error()
			return
		}
		ports[p] = l.Addr().(*net.TCPAddr).Port
	}
	if !spec.NoApply {
		if err := Restrict(spec.Rules); err != nil {
			res.Err = err.Error()
			return
		}
	}
	for _, o := range spec.Ops {
		res.Errs = append(res.Errs, testutil.ErrnoName(do(o)))
	}
	return
}

func do(o op) error {
	switch o.Kind {
	case "read":
		_, err := os.ReadFile(o.Path)
		return err
	case "write":
		return os.WriteFile(o.Path, []byte("x"), 0o600)
	case "exec":
		return exec.Command(o.Path).Run()
	case "connect":
		// raw connect on this (restricted) thread; the Go netpoller would not change the
		// answer, but keep the syscall where the domain is.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Connect(fd, &unix.SockaddrInet4{Port: o.Port, Addr: [4]byte{127, 0, 0, 1}})
	}
	return fmt.Errorf("unknown op %q", o.Kind)
}

func runInChild(t *testing.T, spec childSpec) childResult {
	t.Helper()
	var res childResult
	if ee := testutil.RunJSON(t, testutil.JSONCommand(t, childName, spec), &res); ee != nil {
		t.Fatalf("child: %v", ee)
	}
	if res.Err != "" {
		t.Fatalf("child: %s", res.Err)
	}
	return res
}

// requireLandlock returns the probed ABI. A failed probe skips the test only where the kernel
// does not run Landlock: where it does, the probe is what is broken.
func requireLandlock(t *testing.T) int {
	t.Helper()
	abi, err := Probe()
	if err == nil {
		return abi
	}
	switch has, lerr := testutil.HasLSM("landlock"); {
	case lerr != nil:
		testutil.Unavailable(t, "landlock probe: %v; whether the kernel runs landlock is unknown: %v", err, lerr)
	case has:
		t.Fatalf("the kernel runs landlock, yet the probe failed: %v", err)
	default:
		testutil.Unavailable(t, "landlock is not among the kernel's active LSMs: %v", err)
	}
	return 0
}

// The probe must agree with the kernel's list of active LSMs both ways: an ABI where Landlock
// runs, a refusal where it does not.
func TestProbe(t *testing.T) {
	has, err := testutil.HasLSM("landlock")
	if err != nil {
		testutil.Unavailable(t, "cannot tell whether the kernel runs landlock: %v", err)
	}
	abi, err := Probe()
	switch {
	case has && err != nil:
		t.Fatalf("the kernel runs landlock, yet the probe failed: %v", err)
	case has && abi < 1:
		t.Fatalf("the kernel runs landlock, yet the probe says abi %d", abi)
	case !has && err == nil:
		t.Fatalf("landlock is not among the kernel's active LSMs, yet the probe says abi %d", abi)
	case !has:
		t.Logf("landlock is not active here and the probe says so: %v", err)
		return
	}
	t.Logf("landlock abi %d", abi)
}

func TestRightsByABI(t *testing.T) {
	for _, tc := range []struct {
		abi        int
		has, lacks uint64
	}{
		{0, 0, Execute},
		{1, Execute | MakeSym, Refer},
		{2, Refer, Truncate},
		{3, Truncate, IoctlDev},
		{5, IoctlDev | Refer | Truncate, 0},
		{7, FSRights(5), 0},
	} {
		got := FSRights(tc.abi)
		if got&tc.has != tc.has || got&tc.lacks != 0 {
			t.Errorf("FSRights(%d) = %v", tc.abi, FSNames(got))
		}
	}
	if NetRights(3) != 0 || NetRights(4) != BindTCP|ConnectTCP {
		t.Error("net rights by abi")
	}
	if Scopes(5) != 0 || Scopes(6) != ScopeAbstractUnix|ScopeSignal {
		t.Error("scopes by abi")
	}
}

func TestRestrictFilesystem(t *testing.T) {
	abi := requireLandlock(t)
	abi = min(abi, MaxABI)
	ws := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	// a copy of a system binary inside the (writable, not executable) workspace
	bin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) binary")
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	wsBin := filepath.Join(ws, "true")
	if err := os.WriteFile(wsBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// a read-only grant of the test's own: writing under /etc would race other packages'
	// compiles, which list /etc
	ro := t.TempDir()
	sysExec := Execute | ReadFile | ReadDir
	write := FSRights(abi) &^ (Execute | MakeChar | MakeBlock)
	rules := Ruleset{
		HandledFS: FSRights(abi),
		Paths: []PathRule{
			{Path: "/usr", Access: sysExec},
			{Path: "/etc", Access: ReadFile | ReadDir},
			{Path: ro, Access: ReadFile | ReadDir},
			{Path: ws, Access: write},
			{Path: "/dev/null", Access: ReadFile | WriteFile}, // os/exec opens it for stdio
		},
	}
	realBin, _ := filepath.EvalSymlinks(bin)
	ops := []op{
		{Kind: "read", Path: secret},                          // outside every grant
		{Kind: "write", Path: filepath.Join(ws, "out")},       // inside the writable workspace
		{Kind: "write", Path: filepath.Join(outside, "nope")}, // outside
		{Kind: "read", Path: "/etc/hostname"},                 // read grant
		{Kind: "write", Path: filepath.Join(ro, "new")},       // read-only grant
		{Kind: "exec", Path: realBin},                         // exec grant
		{Kind: "exec", Path: wsBin},                           // writable, no exec grant
	}
	for _, tc := range []struct {
		name    string
		noApply bool
		want    []string
	}{
		// the control run shows each denial below is Landlock's doing, not file modes
		{"control", true, []string{"", "", "", "", "", "", ""}},
		{"restricted", false, []string{"EACCES", "", "EACCES", "", "EACCES", "", "EACCES"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runInChild(t, childSpec{Rules: rules, Ops: ops, NoApply: tc.noApply})
			os.Remove(filepath.Join(ro, "new"))
			for i, o := range ops {
				if res.Errs[i] != tc.want[i] {
					t.Errorf("%s %s: got %q, want %q", o.Kind, o.Path, res.Errs[i], tc.want[i])
				}
			}
		})
	}
}

func TestRestrictRefusesSymlinkedRulePath(t *testing.T) {
	requireLandlock(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	spec := childSpec{Rules: Ruleset{HandledFS: ReadFile, Paths: []PathRule{{Path: link, Access: ReadFile}}}}
	var res childResult
	if ee := testutil.RunJSON(t, testutil.JSONCommand(t, childName, spec), &res); ee != nil {
		t.Fatalf("child: %v", ee)
	}
	if res.Err == "" {
		t.Fatal("a symlinked rule path was accepted")
	}
	t.Logf("refused: %s", res.Err)
}

// A rule path removed between the compile and the restriction gets no rule: the rest apply, and
// a file made later under its name is not granted.
func TestRestrictSkipsRemovedRulePath(t *testing.T) {
	requireLandlock(t)
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone")
	kept := filepath.Join(dir, "kept")
	if err := os.WriteFile(kept, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	rules := Ruleset{HandledFS: ReadFile | WriteFile | MakeReg, Paths: []PathRule{
		{Path: gone, Access: ReadFile | WriteFile},
		{Path: kept, Access: ReadFile},
		{Path: "/dev/null", Access: ReadFile | WriteFile}, // os/exec opens it for stdio
	}}
	res := runInChild(t, childSpec{Rules: rules, Ops: []op{{Kind: "read", Path: kept}, {Kind: "write", Path: gone}}})
	if res.Err != "" || res.Errs[0] != "" || res.Errs[1] != "EACCES" {
		t.Fatalf("restrict %q; read of the kept rule %q, write under the removed one's name %q", res.Err, res.Errs[0], res.Errs[1])
	}
}

func TestRestrictTCPConnect(t *testing.T) {
	abi := requireLandlock(t)
	if abi < 4 {
		t.Skipf("landlock abi %d has no network rights (needs 4)", abi)
	}
	// two listeners on fixed high ports; the child grants connect to the first only
	a, b := freePort(t), freePort(t)
	rules := Ruleset{HandledFS: ReadFile, HandledNet: ConnectTCP, Ports: []PortRule{{Port: uint16(a), Access: ConnectTCP}}}
	res := runInChild(t, childSpec{Rules: rules, Listen: []int{a, b},
		Ops: []op{{Kind: "connect", Port: a}, {Kind: "connect", Port: b}}})
	if res.Errs[0] != "" || res.Errs[1] != "EACCES" {
		t.Fatalf("connect granted port %d: %q, other port %d: %q", a, res.Errs[0], b, res.Errs[1])
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
