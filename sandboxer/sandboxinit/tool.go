package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
)

// The tool runs in a user namespace of its own, as ToolUID/ToolGID inside, mapped to the host
// ids its sandbox was given (one uid and one gid, nothing else: the host's root and every
// other user show as nobody). The namespace must be created by a process whose effective uid
// is the host id: per-user kernel counts (inotify instances, user namespaces) are charged to
// the namespace's owner at every level up, so a namespace root made would couple every call
// to root's limits. And it must be created before the init confines itself (its seccomp
// filter refuses new namespaces, its Landlock domain writing the id maps). So the init starts
// a second stage, berm-stage (cmd/berm-stage), in the new namespace; that stage confines
// itself as the tool will be (no_new_privs, Landlock, seccomp) and executes the tool in its
// place. It is a small C program: its exec is on the call's critical path.
const (
	ToolUID = 1000
	ToolGID = 1000
)

// toolConfig is what the stage reads on fd 3 (stageconfig.go is its format); it reports a
// failure to start the tool on fd 4 (close-on-exec: nothing arrives when the tool started).
type toolConfig struct {
	Argv     []string
	Env      []string
	Dir      string
	Landlock *landlock.Ruleset
	Seccomp  Program
	// Approvals is installed last, with a listener sent back on the channel (Config.Approvals).
	Approvals []unix.SockFilter
	// Terminal: the stdin sent with the configuration is the call's pty; the tool takes it as
	// its controlling terminal, and as stdout and stderr where the caller's are terminals.
	Terminal *Terminal
}

type toolFailure struct {
	Code  int    `json:"code"`
	Error string `json:"error"`
}

// toolStage is the second stage, started and waiting for its configuration.
type toolStage struct {
	cmd    *exec.Cmd
	cfgW   *os.File // its channel: its configuration and the tool's stdin
	failed *os.File // "up" once it runs, then a toolFailure if the tool did not start
	isUp   bool
	// keepChannel: the approval listener comes back on cfgW once the stage is confined.
	keepChannel bool
}

// startTool starts the stage as the sandbox's identity (hostUID, hostGID). It is started as
// soon as the init is in every cgroup of the call (ahead of the call, for a warm init), from
// the host's view. The call's root reaches it later: pivot_root moves every process of the
// namespace whose root was the old one. It waits for its configuration and the tool's stdin
// on its channel.
func startTool(bin *os.File, hostUID, hostGID uint32) (*toolStage, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the tool's stage's channel: %w", err)
	}
	cfgR := os.NewFile(uintptr(pair[1]), "stage config")
	defer cfgR.Close()
	cfgW := os.NewFile(uintptr(pair[0]), "stage config")
	failR, failW, err := os.Pipe()
	if err != nil {
		cfgW.Close()
		return nil, err
	}
	defer failW.Close()
	stageCmd := func(path string, extra ...*os.File) *exec.Cmd {
		return &exec.Cmd{
			Path: path, Args: []string{StageBinary}, Env: []string{},
			Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
			ExtraFiles: append([]*os.File{cfgR, failW}, extra...),
			SysProcAttr: &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: ToolUID, HostID: int(hostUID), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: ToolGID, HostID: int(hostGID), Size: 1}},
				Credential:  &syscall.Credential{Uid: ToolUID, Gid: ToolGID},
				// A session of its own: the tool never shares the launcher's, whose
				// controlling terminal may be the caller's (opening /dev/tty would reach it).
				Setsid: true,
			},
		}
	}
	cmd := stageCmd(bin.Name())
	if err = startAs(cmd, hostUID, hostGID); err != nil {
		// fd 5 in the stage; it closes every descriptor above 4 before it executes the tool
		cmd = stageCmd("/proc/self/fd/5", bin)
		err = startAs(cmd, hostUID, hostGID)
	}
	if err != nil {
		cfgW.Close()
		failR.Close()
		return nil, err
	}
	return &toolStage{cmd: cmd, cfgW: cfgW, failed: failR}, nil
}

// openStage opens the stage's binary, beside the init's own, as root and from the host's view
// (before a warm init's prepared root covers a temporary directory): it is executed through
// this descriptor when the host ids cannot reach its path (a directory closed to others) or
// the path is covered since.
func openStage() (*os.File, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the tool's stage: find the init's own binary: %w", err)
	}
	path := filepath.Join(filepath.Dir(self), StageBinary)
	bin, err := os.OpenFile(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the tool's stage (%s, installed beside the init: make build puts it in bin/): %w", path, err)
	}
	return bin, nil
}

// up waits until the stage runs: its dynamic loader, when it has one, has read what it reads
// of the host; nothing after that does.
func (t *toolStage) up() error {
	if t.isUp {
		return nil
	}
	t.isUp = true
	var b [1]byte
	if n, _ := t.failed.Read(b[:]); n != 1 || b[0] != stageUp {
		return errors.New("the tool's stage ended before it started")
	}
	return nil
}

// configure hands the stage the tool's configuration and stdin. It waits for start.
func (t *toolStage) configure(cfg *Config, stdin *os.File) error {
	tc := toolConfig{Argv: cfg.Argv, Env: cfg.Env, Dir: cfg.Workspace, Landlock: cfg.Landlock, Seccomp: cfg.Seccomp, Approvals: cfg.Approvals, Terminal: cfg.Terminal}
	msg, err := encodeStage(tc, setIDFilter())
	if err == nil {
		err = sendStage(t.cfgW, msg, int(stdin.Fd()))
	}
	if err != nil {
		return fmt.Errorf("configure the tool's stage: %w", err)
	}
	t.keepChannel = len(cfg.Approvals) > 0
	return nil
}

// start lets the configured stage go on: it confines itself and executes the tool.
func (t *toolStage) start() error {
	_, err := t.cfgW.Write([]byte{stageStart})
	if !t.keepChannel || err != nil {
		// With approvals the channel stays open: the listener comes back on it.
		t.cfgW.Close()
	}
	if err != nil {
		return fmt.Errorf("start the tool's stage: %w", err)
	}
	return nil
}

// kill ends a stage whose call could not be set up.
func (t *toolStage) kill() {
	_ = t.cmd.Process.Kill()
	_ = t.cmd.Wait()
}

// result waits until the stage executed the tool (its failure pipe closes on exec) or failed.
func (t *toolStage) result() *toolFailure {
	defer t.failed.Close()
	var tf toolFailure
	if data, _ := io.ReadAll(t.failed); len(data) > 0 && json.Unmarshal(data, &tf) == nil {
		_ = t.cmd.Wait()
		return &tf
	}
	return nil
}

const stageUp = 'u'

// startAs starts cmd with the init's effective ids switched to the host ids for the clone, so
// the new user namespace belongs to them; the real and saved ids stay root, which switches
// back. No supplementary group survives: root's would stay with the tool, unremovable once
// setgroups is denied in its namespace.
func startAs(cmd *exec.Cmd, uid, gid uint32) (err error) {
	if uid == 0 || gid == 0 {
		return fmt.Errorf("the call has no host ids of its own (uid %d gid %d)", uid, gid)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(0, int(gid), 0); err != nil {
		return fmt.Errorf("switch to gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(0, int(uid), 0); err != nil {
		_ = syscall.Setresgid(0, 0, 0)
		return fmt.Errorf("switch to uid %d: %w", uid, err)
	}
	defer func() {
		// Back to root: the init must still confine itself, and it reaps the call.
		if e := syscall.Setresuid(0, 0, 0); e != nil && err == nil {
			err = fmt.Errorf("switch back to root: %w", e)
		}
		if e := syscall.Setresgid(0, 0, 0); e != nil && err == nil {
			err = fmt.Errorf("switch back to root's group: %w", e)
		}
	}()
	// A change of effective uid makes the process undumpable, and /proc/PID/uid_map of the
	// child (which shares the init's memory until it executes) root's: the new owner could
	// not write the maps.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable for the id maps: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the tool's stage: %w", err)
	}
	return nil
}

// IDsArg passes the sandbox's host ids to its init (its second argument).
func IDsArg(uid, gid uint32) string { return fmt.Sprintf("ids=%d:%d", uid, gid) }

func parseIDs(args []string) (uint32, uint32, error) {
	var uid, gid uint32
	if len(args) != 2 {
		return 0, 0, errors.New("the init was started without its sandbox's host ids")
	}
	if _, err := fmt.Sscanf(args[1], "ids=%d:%d", &uid, &gid); err != nil || uid == 0 || gid == 0 {
		return 0, 0, fmt.Errorf("the sandbox's host ids %q: %v", args[1], err)
	}
	return uid, gid, nil
}
