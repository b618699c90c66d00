package sandboxinit

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/testutil"
)

func TestMain(m *testing.M) {
	testutil.Main(m, testutil.Children{"reap": testutil.JSONChild(reapChild)})
}

type reapResult struct {
	Reaped bool   `json:"reaped"`
	Left   bool   `json:"left"` // a process other than the child was still in its namespace
	Error  string `json:"error,omitempty"`
}

// reapChild is pid 1 of a new pid namespace: it leaves what the case names behind, as a tool
// would, then reaps.
func reapChild(mode string) reapResult {
	// Capabilities are per thread: reapAll runs on this one.
	runtime.LockOSThread()
	start := func(uid uint32, argv ...string) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		return cmd.Start()
	}
	var err error
	switch mode {
	case "daemons":
		// a session of its own, an orphan (its parent gone: reparented here), a plain child
		if err = start(0, "setsid", "sleep", "1000"); err == nil {
			if err = exec.Command("sh", "-c", "sleep 1000 & exit 0").Run(); err == nil {
				err = start(0, "sleep", "1000")
			}
		}
	case "fork-storm":
		err = start(0, "sh", "-c", "while :; do sleep 1000 & done")
	case "nested-pidns":
		err = start(0, "unshare", "--pid", "--fork", "sh", "-c", "sleep 1000 & sleep 1000")
	case "not-permitted":
		// A process of another user, and no CAP_KILL: kill(-1) reaches nothing, and says so
		// only by the process still being there.
		if err = start(65534, "sleep", "1000"); err == nil {
			err = dropCapKill()
		}
	default:
		err = fmt.Errorf("no case %q", mode)
	}
	if err != nil {
		return reapResult{Error: err.Error()}
	}
	time.Sleep(50 * time.Millisecond)
	r := reapResult{Reaped: reapAll()}
	r.Left = unix.Kill(-1, 0) != unix.ESRCH
	return r
}

func dropCapKill() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Effective &^= 1 << unix.CAP_KILL
	return unix.Capset(&hdr, &data[0])
}

// TestReapAll: the init reports a call's end only once nothing else of it runs (the launcher
// then closes the call's books without waiting for the init's own exit). Whatever a tool left
// behind is gone when reapAll says so; when it cannot make sure, it says so, in bounded time.
func TestReapAll(t *testing.T) {
	testutil.RequireRoot(t, "a pid namespace of its own")
	for _, tc := range []struct {
		mode   string
		reaped bool
	}{
		{"daemons", true},
		{"fork-storm", true},
		{"nested-pidns", true},
		{"not-permitted", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			cmd := testutil.JSONCommand(t, "reap", tc.mode)
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}
			// A reapAll that never returns is a failure, not a test run out of time.
			var hung atomic.Bool
			timer := time.AfterFunc(30*time.Second, func() {
				hung.Store(true)
				_ = cmd.Process.Kill()
			})
			defer timer.Stop()
			var r reapResult
			if ee := testutil.RunJSON(t, cmd, &r); ee != nil {
				t.Fatalf("child: %v (hung: %v)", ee, hung.Load())
			}
			if r.Error != "" {
				t.Fatalf("setting the case up: %s", r.Error)
			}
			if r.Reaped != tc.reaped || r.Left == tc.reaped {
				t.Errorf("reapAll = %v with a process left: %v; want %v, and a process left only when it says false", r.Reaped, r.Left, tc.reaped)
			}
		})
	}
}
