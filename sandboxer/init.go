package sandboxer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// InitArg0 is argv[0] of the sandbox's init: the berm binary re-executed inside the call's
// fresh namespaces (and already inside its cgroup), before the tool is started.
const InitArg0 = "berm-init"

// initConfig is what the launcher sends the init over fd 3. The init waits for it (EOF) before
// doing anything, which gives the launcher time to place it in the v1 cgroups.
type initConfig struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Workspace string   `json:"workspace"`
	Hostname  string   `json:"hostname"`
	TmpBytes  int64    `json:"tmp_bytes"`
	UID       uint32   `json:"uid"`
	GID       uint32   `json:"gid"`
	NewNet    bool     `json:"new_net"`
}

// initStatus is what the init reports over fd 4 when the tool has ended.
type initStatus struct {
	Started bool   `json:"started"`
	Exited  bool   `json:"exited"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal"`
	Error   string `json:"error,omitempty"`
}

// InitMain is the sandbox init. It never returns.
func InitMain() {
	// Thread attributes (no_new_privs) must be set on the thread that forks the tool.
	runtime.LockOSThread()
	status := os.NewFile(4, "status")
	report := func(st initStatus, code int) {
		_ = json.NewEncoder(status).Encode(st)
		os.Exit(code)
	}
	cfgData, err := io.ReadAll(os.NewFile(3, "config"))
	if err != nil {
		report(initStatus{Error: "read config: " + err.Error()}, 125)
	}
	var cfg initConfig
	if err := json.Unmarshal(cfgData, &cfg); err != nil || len(cfg.Argv) == 0 {
		// The launcher closed without a config: it failed to set the call up. Nothing to run.
		report(initStatus{Error: "no configuration from launcher"}, 125)
	}
	if err := setupMounts(&cfg); err != nil {
		report(initStatus{Error: err.Error()}, 125)
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		report(initStatus{Error: "sethostname: " + err.Error()}, 125)
	}
	if cfg.NewNet {
		if err := loopbackUp(); err != nil {
			report(initStatus{Error: err.Error()}, 125)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		report(initStatus{Error: "no_new_privs: " + err.Error()}, 125)
	}

	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		report(initStatus{Error: err.Error(), Exited: true, Code: 127}, 127)
	}
	cmd := &exec.Cmd{
		Path: path, Args: cfg.Argv, Env: cfg.Env, Dir: cfg.Workspace,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: cfg.UID, Gid: cfg.GID, Groups: []uint32{}},
		},
	}
	if err := cmd.Start(); err != nil {
		report(initStatus{Error: err.Error(), Exited: true, Code: 126}, 126)
	}
	tool := cmd.Process.Pid
	// As pid 1 of the call's pid namespace, reap every orphan until the tool itself ends;
	// when init exits, the kernel kills whatever else is left in the namespace.
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			report(initStatus{Started: true, Error: "wait: " + err.Error()}, 125)
		}
		if pid != tool {
			continue
		}
		st := initStatus{Started: true}
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
			report(st, 128+st.Signal)
		}
		st.Exited, st.Code = true, ws.ExitStatus()
		report(st, st.Code)
	}
}

func setupMounts(cfg *initConfig) error {
	// Nothing mounted in here propagates to the host, and nothing the host mounts later
	// appears here.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc for the call's pid namespace: %w", err)
	}
	// Hold the workspace before /tmp is replaced: it may live under the host's /tmp.
	ws, err := unix.Open(cfg.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", cfg.Workspace, err)
	}
	defer unix.Close(ws)
	opts := fmt.Sprintf("size=%d,mode=1777", cfg.TmpBytes)
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount private /tmp: %w", err)
	}
	// Parents made here exist only in the private /tmp; the tool must be able to traverse them.
	if err := os.MkdirAll(cfg.Workspace, 0o755); err != nil {
		return fmt.Errorf("workspace mount point %s: %w", cfg.Workspace, err)
	}
	// The workspace is bound without its sub-mounts: only the workspace's own filesystem is
	// reachable through it.
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", ws), cfg.Workspace, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind workspace %s: %w", cfg.Workspace, err)
	}
	if err := unix.Mount("", cfg.Workspace, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount workspace nosuid: %w", err)
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// lookPath resolves the tool with the call's PATH, not the launcher's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("exec: " + name + ": not found in the call's PATH")
}
