// Package sandboxinit is the first process of every tool call: it runs inside the call's fresh
// namespaces and cgroup, builds the call's root, applies Landlock and seccomp, and starts the
// tool as pid 2, reaping orphans as pid 1 until the tool ends. It is its own small binary
// (cmd/berm-init) because it starts once per call: a process that links less starts faster.
package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
	"github.com/bermsec/berm/agent/policy/seccomp"
)

// Arg0 is argv[0] of the sandbox's init: berm-init, or the berm binary re-executed under this
// name when berm-init is not installed beside it.
const Arg0 = "berm-init"

// Bind is one path of the host the call's root shows.
type Bind struct {
	Path     string `json:"path"`
	Writable bool   `json:"writable,omitempty"`
	Link     string `json:"link,omitempty"` // the host path is a symlink to this: recreate it
}

// RootPlan is the call's file system: what the policy grants, nothing else. The init builds it
// on a fresh tmpfs and pivots into it; Landlock then narrows it further per path.
type RootPlan struct {
	Binds   []Bind   `json:"binds"`
	Devices []string `json:"devices"` // /dev entries bound from the host
	// Masked are mount points of the host inside the workspace. The workspace is bound without
	// its sub-mounts, so the call would see the plain directories underneath; removing one of
	// them would detach the host's mount (rmdir of a mount point of another namespace). Each is
	// covered by an empty read-only tmpfs: present, empty, not removable (EBUSY).
	Masked []string `json:"masked"`
}

// Config is what the launcher sends the init over fd 3. A single byte on fd 5 then lets it
// start the tool: the launcher sends it once the init is in the call's v1 cgroups.
type Config struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Workspace string   `json:"workspace"`
	// Hold: the init builds the call's root, then waits for the launcher's Start on fd 3
	// before the tool's stage goes on. The launcher registers the call with the agent
	// meanwhile; without the Start (the channel closed) the tool never starts.
	Hold      bool   `json:"hold,omitempty"`
	Hostname  string `json:"hostname"`
	TmpBytes  int64  `json:"tmp_bytes"`
	TmpInodes int64  `json:"tmp_inodes,omitempty"` // 0: the kernel's default
	// HostUID and HostGID are the sandbox's own host ids: the tool runs as ToolUID/ToolGID in a
	// user namespace that maps them to these (see startTool).
	HostUID uint32   `json:"host_uid"`
	HostGID uint32   `json:"host_gid"`
	NewNet  bool     `json:"new_net"`
	Root    RootPlan `json:"root"`
	// TmpNoExec mounts the call's /tmp noexec; MemfdNoExec sets vm.memfd_noexec=2 in the
	// call's pid namespace (the policy grants no exec on a writable tree).
	TmpNoExec   bool `json:"tmp_noexec,omitempty"`
	MemfdNoExec bool `json:"memfd_noexec,omitempty"`
	// HostRoot keeps the host's file system view (audit mode: the mount layer cannot only
	// report, so it steps aside; /tmp is still private and the workspace still bound).
	HostRoot bool `json:"host_root,omitempty"`
	// Landlock is applied on the thread that starts the tool (nil in audit mode: Landlock
	// cannot only report). Seccomp is installed on every thread of the init right before.
	Landlock *landlock.Ruleset `json:"landlock,omitempty"`
	Seccomp  Program           `json:"seccomp,omitempty"`

	// Secrets are the brokered credentials delivered as files (secrets.go).
	Secrets []SecretFile `json:"secrets,omitempty"`
	// Approvals is the approval filter (policy.CompiledApprovals.Filter): the tool's stage
	// installs it last, with a listener it sends here, which the init forwards to the
	// launcher over fd 3 before the tool runs a single instruction.
	Approvals []unix.SockFilter `json:"approvals,omitempty"`
	// ApprovalConnect: the approval rules hold connects; the init keeps its channel and
	// performs the connects the supervisor asks for (Message.Connect) until the call ends.
	ApprovalConnect bool `json:"approval_connect,omitempty"`

	// Terminal is set when the stdin sent with the config is the call's pty: the tool gets it
	// as its controlling terminal too, and as stdout and stderr where asked.
	Terminal *Terminal `json:"terminal,omitempty"`

	// workspaceTree is the workspace's mount, detached by the launcher (open_tree) and passed
	// with the config: a warm init's mount namespace predates the call and may not show it.
	workspaceTree int
}

// Terminal is how the tool uses its pty.
type Terminal struct {
	Stdout bool `json:"stdout,omitempty"`
	Stderr bool `json:"stderr,omitempty"`
	// Name is the pty's name on the host (/dev/pts/N): a detached mount of its device file
	// comes as a third file with the config, to be shown there in the call's /dev.
	Name string `json:"name,omitempty"`
}

// Status is what the init reports over fd 4 when the tool has ended.
type Status struct {
	Started bool   `json:"started"`
	Exited  bool   `json:"exited"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal"`
	Error   string `json:"error,omitempty"`
	// Reaped: every other process of the call had ended and was reaped when the init
	// reported; only the init itself, on its way out, is left in the call's cgroup.
	Reaped bool `json:"reaped,omitempty"`
}

// Main is the sandbox init. It never returns. Its phases: start up (its own files, ids and
// the stage's binary), await the call (a warm init first prepares what does not depend on
// it: prepareWarm), take the call, configure it (the stage's configuration, the root, host
// name, network, a held call's release), release the tool, then reap until the tool ends.
func Main() {
	// Thread attributes (no_new_privs) must be set on the thread that forks the tool.
	runtime.LockOSThread()
	p := startUp()
	msg, fds := p.awaitCall()
	cfg, stdin := p.takeCall(msg, fds)
	if p.stage == nil {
		p.startStage()
	}
	p.configureCall(&cfg, stdin, fds)
	p.releaseTool(&cfg)
	p.reapUntilToolEnds()
}

// initProc is the init while it sets up its call: the status it reports on fd 4, the
// launcher's channel on fd 3, the sandbox's host ids and the tool's stage.
type initProc struct {
	status           *os.File
	ch               *channel
	hostUID, hostGID uint32
	stageBin         *os.File // until the stage starts
	stage            *toolStage
	// prepared is the root a warm init built ahead of its call; loUp: it brought up loopback.
	prepared *RootPlan
	loUp     bool
}

// report tells the launcher how the call ended and exits with code.
func (p *initProc) report(st Status, code int) {
	_ = json.NewEncoder(p.status).Encode(st)
	os.Exit(code)
}

// fail reports a set-up failure before the tool's stage runs.
func (p *initProc) fail(msg string) { p.report(Status{Error: msg}, 125) }

// fatal reports a set-up failure once the tool's stage runs, ending it first.
func (p *initProc) fatal(msg string) {
	p.stage.kill()
	p.fail(msg)
}

// startUp readies what the init has of its own: the tool gets stdin, stdout and stderr,
// nothing else of the init's: not the status pipe (a tool that wrote there would forge or
// garble its own end), not the go pipe, not what the launcher inherited from whoever started
// it.
func startUp() *initProc {
	p := &initProc{status: os.NewFile(4, "status"), ch: &channel{fd: 3}}
	if err := closeOnExecFrom(3); err != nil {
		p.fail("mark inherited files close-on-exec: " + err.Error())
	}
	var err error
	if p.hostUID, p.hostGID, err = parseIDs(os.Args); err != nil {
		p.fail(err.Error())
	}
	if p.stageBin, err = openStage(); err != nil {
		p.fail(err.Error())
	}
	return p
}

// startStage starts the tool's stage once the launcher says the init is in every cgroup of
// the call (one byte on fd 5): the stage, and everything it forks, must be counted.
func (p *initProc) startStage() {
	var goByte [1]byte
	if n, _ := os.NewFile(5, "go").Read(goByte[:]); n != 1 {
		p.fail("launcher did not let the call start")
	}
	// The init's /proc must be the call's pid namespace's before it forks: the id maps of
	// its child are written through /proc/PID, PID as this namespace numbers it. Mounts
	// made here stay in the call (made private first).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		p.fail("make mounts private: " + err.Error())
	}
	if err := mountProc("/proc"); err != nil {
		p.fail(err.Error())
	}
	stage, err := startTool(p.stageBin, p.hostUID, p.hostGID)
	p.stageBin.Close()
	if err != nil {
		p.fail(err.Error())
	}
	p.stage = stage
}

// awaitCall reads the launcher's first message: the call, or, for a warm init, what to
// prepare ahead of it (prepareWarm), and then the call.
func (p *initProc) awaitCall() (*Message, []*os.File) {
	msg, fds, err := p.ch.next()
	if err != nil {
		// The launcher closed without a config: it failed to set the call up. Nothing to run.
		p.fail(err.Error())
	}
	if msg.Prepare != nil {
		p.prepareWarm(msg)
		if msg, fds, err = p.ch.next(); err != nil {
			p.fatal(err.Error())
		}
	}
	return msg, fds
}

// prepareWarm builds what does not depend on the call and starts the tool's stage, for a warm
// init waiting for its call.
func (p *initProc) prepareWarm(msg *Message) {
	if err := prepareRoot(msg.Prepare); err != nil {
		p.fail("prepare root: " + err.Error())
	}
	p.prepared = msg.Prepare
	if msg.PrepareNet {
		if err := loopbackUp(); err != nil {
			p.fail(err.Error())
		}
		p.loUp = true
	}
	p.startStage()
	if err := p.stage.up(); err != nil {
		p.fatal(err.Error())
	}
	// Running (its libraries loaded, should it be linked dynamically), the stage reads
	// nothing of the host's any more: into the root.
	if err := pivotInto(); err != nil {
		p.fatal("prepare root: " + err.Error())
	}
	warmUp()
}

// takeCall checks the launcher's call and the files sent with it: the tool's stdin, the
// workspace's detached mount and, with a terminal, its device's. The channel closes here when
// nothing more will come over it.
func (p *initProc) takeCall(msg *Message, fds []*os.File) (Config, *os.File) {
	if msg.Call == nil || len(msg.Call.Argv) == 0 {
		p.fail("no call in the launcher's configuration")
	}
	cfg := *msg.Call
	// The sandbox's ids are the init's own (its argv), whatever the config says.
	cfg.HostUID, cfg.HostGID = p.hostUID, p.hostGID
	if want := filesWithCall(&cfg); len(fds) != want {
		p.fail(fmt.Sprintf("expected the tool's stdin, the workspace and %d more files with the config, got %d files", want-2, len(fds)))
	}
	cfg.workspaceTree = int(fds[1].Fd())
	if len(cfg.Approvals) == 0 && !cfg.Hold {
		unix.Close(3)
	}
	return cfg, fds[0]
}

// filesWithCall is how many files come with a call: stdin and the workspace, and a terminal's
// device.
func filesWithCall(cfg *Config) int {
	if cfg.Terminal != nil && cfg.Terminal.Name != "" {
		return 3
	}
	return 2
}

// configureCall makes the call's sandbox what its config says: the stage reads (and decodes)
// its configuration while the root is built; it does nothing with it until releaseTool, once
// the root, host name, network and memfd setting are the call's. A held call waits here for
// the launcher's Start.
func (p *initProc) configureCall(cfg *Config, stdin *os.File, fds []*os.File) {
	stage := p.stage
	if err := stage.configure(cfg, stdin); err != nil {
		p.fatal(err.Error())
	}
	stdin.Close()
	if err := setupMounts(cfg, p.prepared, stage.up); err != nil {
		p.fatal(err.Error())
	}
	// The workspace's fd was used by number: its File must not be collected (and closed) first.
	runtime.KeepAlive(fds[1])
	if filesWithCall(cfg) == 3 {
		if !cfg.HostRoot {
			// Cosmetic (the tool has its terminal either way): a failure leaves it unnamed.
			_ = showTerminal(int(fds[2].Fd()), cfg.Terminal.Name)
		}
		fds[2].Close()
	}
	if cfg.MemfdNoExec {
		// Per pid namespace, inherited by nested ones and never lowered there: the tool
		// cannot undo it.
		if err := os.WriteFile("/proc/sys/vm/memfd_noexec", []byte("2"), 0); err != nil {
			p.fatal("vm.memfd_noexec: " + err.Error())
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		p.fatal("sethostname: " + err.Error())
	}
	if cfg.NewNet && !p.loUp {
		if err := loopbackUp(); err != nil {
			p.fatal(err.Error())
		}
	}
	if cfg.Hold {
		m, more, err := p.ch.next()
		for _, f := range more {
			f.Close()
		}
		if err != nil || !m.Start || len(more) != 0 {
			p.fatal(fmt.Sprintf("launcher did not let the tool start (%d files): %v", len(more), err))
		}
		if len(cfg.Approvals) == 0 {
			unix.Close(3)
		}
	}
}

// releaseTool lets the stage execute the tool, forwards the approval listener, and confines
// the init itself as the tool is: it stays in the call until its end, so it takes the tool's
// seccomp filter too. Its Landlock domain would add nothing (it opens no file from here on)
// but the cost of building it twice. A tool that did not start is reported here.
func (p *initProc) releaseTool(cfg *Config) {
	stage := p.stage
	if err := stage.start(); err != nil {
		p.fatal(err.Error())
	}
	if len(cfg.Approvals) > 0 {
		// The listener comes from the stage just before it executes the tool; without it
		// (the stage failed first) the launcher sees the channel close.
		forwardListener(stage)
		if cfg.ApprovalConnect {
			go serveConnects(3)
		} else {
			unix.Close(3)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		p.fatal("no_new_privs: " + err.Error())
	}
	if len(cfg.Seccomp) > 0 {
		if err := seccomp.Install(cfg.Seccomp, seccomp.TSync); err != nil {
			p.fatal("seccomp: " + err.Error())
		}
	}
	if tf := stage.result(); tf != nil {
		// 126 and 127 are the tool's (could not execute, not found); 125 is the setup's.
		p.report(Status{Error: tf.Error, Exited: tf.Code != 125, Code: tf.Code}, tf.Code)
	}
}

// reapUntilToolEnds reaps every orphan, as pid 1 of the call's pid namespace, until the tool
// itself ends; then ends whatever else is left (reapAll), or leaves it to the kernel, which
// kills it when the init exits, and reports the tool's status.
func (p *initProc) reapUntilToolEnds() {
	tool := p.stage.cmd.Process.Pid
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.report(Status{Started: true, Error: "wait: " + err.Error()}, 125)
		}
		if pid != tool {
			continue
		}
		st, code := Status{Started: true}, 0
		if ws.Signaled() {
			st.Signal = int(ws.Signal())
			code = 128 + st.Signal
		} else {
			st.Exited, st.Code = true, ws.ExitStatus()
			code = st.Code
		}
		if st.Reaped = reapAll(); st.Reaped {
			// The tool's stdout and stderr are this process's too: the launcher's copiers
			// see their end here, not at this process's exit.
			unix.Close(1)
			unix.Close(2)
		}
		p.report(st, code)
	}
}

// reapAll kills every other process of the call's pid namespace (nested namespaces' too) and
// reaps them, so that the launcher can end the call as soon as the status arrives: this
// process's own exit (its runtime's threads and memory, the namespaces' teardown) then
// happens beside the call's end instead of before it. The kernel refuses a fork to a process
// with SIGKILL pending, so nothing is started behind the loop's back; it ends when nothing is
// left to signal and nothing to reap. False, after reapWait at most: something stayed (a
// process this one may not signal, a nested namespace's still on its way out, one slow to
// die); the launcher then waits for the call's cgroup to empty, as for an init that died.
func reapAll() bool {
	deadline := time.Now().Add(reapWait)
	for {
		// -1 from pid 1: every process of the namespace but this one. ESRCH: none at all
		// (zombies count); a process it may not signal does not make it fail.
		killErr := unix.Kill(-1, unix.SIGKILL)
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err == unix.ECHILD && killErr == unix.ESRCH {
				return true
			}
			if err == unix.ECHILD || pid == 0 {
				break
			}
			if err != nil {
				return false
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// reapWait bounds reapAll.
const reapWait = 100 * time.Millisecond

// forwardListener passes the approval listener from the tool's stage to the launcher.
func forwardListener(stage *toolStage) {
	l, _ := recvListener(stage.cfgW)
	stage.cfgW.Close()
	if l == nil {
		return
	}
	_ = SendFrame(3, Message{Listener: true}, int(l.Fd()))
	l.Close()
}

// closeOnExecFrom marks every file descriptor from first up close-on-exec.
func closeOnExecFrom(first int) error {
	err := unix.CloseRange(uint(first), math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err != unix.ENOSYS && err != unix.EINVAL {
		return err
	}
	// Kernels before 5.11: one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// newRoot is where the call's root is built before pivot_root: the init's own /tmp, which
// nothing of the host's is needed from.
const newRoot = "/tmp"

func in(p string) string { return filepath.Join(newRoot, p) }

// prepareRoot builds the root's policy-granted part on a fresh tmpfs at newRoot: the binds,
// /dev and /proc. The call's /tmp, its workspace and the masks inside it come with the call.
func prepareRoot(plan *RootPlan) error {
	// Nothing mounted in here propagates to the host, and nothing the host mounts later
	// appears here.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("berm-root", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("mount new root: %w", err)
	}
	for _, b := range plan.Binds {
		if b.Link != "" {
			if err := os.MkdirAll(filepath.Dir(in(b.Path)), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(b.Link, in(b.Path)); err != nil {
				return fmt.Errorf("link %s: %w", b.Path, err)
			}
			continue
		}
		if err := bindInto(b.Path, in(b.Path), !b.Writable); err != nil {
			return err
		}
	}
	if err := os.Mkdir(in("/dev"), 0o755); err != nil {
		return err
	}
	if err := unix.Mount("berm-dev", in("/dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range plan.Devices {
		if err := bindInto(d, in(d), false); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, in("/dev/"+name)); err != nil {
			return err
		}
	}
	if err := os.Mkdir(in("/proc"), 0o555); err != nil {
		return err
	}
	if err := mountProc(in("/proc")); err != nil {
		return err
	}
	return os.Mkdir(in("/tmp"), 0o1777)
}

// SamePlan says whether a prepared root is the one a call needs (the launcher hands a warm
// sandbox only to a call whose plan is its own: the init, pivoted into it, cannot rebuild).
func SamePlan(a, b *RootPlan) bool {
	return reflect.DeepEqual(a.Binds, b.Binds) && reflect.DeepEqual(a.Devices, b.Devices)
}

// setupMounts completes the call's root and makes it the init's: a warm init's was prepared
// and pivoted into ahead (pivotInto), a cold one's is built here, completed, then pivoted into.
func setupMounts(cfg *Config, prepared *RootPlan, beforePivot func() error) error {
	ws := cfg.workspaceTree
	if prepared != nil && (cfg.HostRoot || !SamePlan(prepared, &cfg.Root)) {
		return errors.New("the warm sandbox's prepared root is not the call's (the launcher hands warm sandboxes to calls with their plan only)")
	}
	if cfg.HostRoot {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make mounts private: %w", err)
		}
		if err := hostRootMounts(cfg, ws); err != nil {
			return err
		}
		return beforePivot()
	}
	root := "/" // a warm init's, pivoted into already
	if prepared == nil {
		if err := prepareRoot(&cfg.Root); err != nil {
			return err
		}
		root = newRoot
	}
	at := func(p string) string { return filepath.Join(root, p) }
	if err := mountTmp(at("/tmp"), cfg.TmpBytes, cfg.TmpInodes, cfg.TmpNoExec); err != nil {
		return err
	}
	// The workspace at its own path (after /tmp: it may live under it), its sub-mounts masked.
	if err := bindWorkspace(ws, at(cfg.Workspace), cfg.Workspace); err != nil {
		return err
	}
	if err := maskSubmounts(root, cfg.Root.Masked); err != nil {
		return err
	}
	if err := mountSecrets(root, cfg); err != nil {
		return err
	}
	if prepared == nil {
		if err := beforePivot(); err != nil {
			return err
		}
		if err := pivotInto(); err != nil {
			return err
		}
	}
	// Nothing new at the top of the root.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount root read-only: %w", err)
	}
	return nil
}

// pivotInto makes the root at newRoot the init's and drops the host's. pivot_root moves every
// process of the namespace whose root was the old one (the tool's stage, started from the
// host's view). Dropping the host's tree (a copy of every host mount) is the costly part of a
// root: a warm init does it before its call.
func pivotInto() error {
	if err := os.Mkdir(in("/.old-root"), 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(newRoot, in("/.old-root")); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.old-root", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	return os.Remove("/.old-root")
}

// hostRootMounts is audit mode's view: the host's root, a private /tmp and /proc, the
// workspace bound at its path.
func hostRootMounts(cfg *Config, ws int) error {
	if err := mountProc("/proc"); err != nil {
		return err
	}
	if err := mountTmp("/tmp", cfg.TmpBytes, cfg.TmpInodes, false); err != nil {
		return err
	}
	if err := bindWorkspace(ws, cfg.Workspace, cfg.Workspace); err != nil {
		return err
	}
	if err := maskSubmounts("/", cfg.Root.Masked); err != nil {
		return err
	}
	return mountSecrets("/", cfg)
}

// mountProc mounts a procfs of the call's pid namespace at dir.
func mountProc(dir string) error {
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc for the call's pid namespace: %w", err)
	}
	return nil
}

// mountTmp mounts the call's private /tmp at dir, capped in bytes and in inodes (a tool
// making empty files would otherwise pin kernel memory without filling a byte).
func mountTmp(dir string, size, inodes int64, noexec bool) error {
	opts := fmt.Sprintf("size=%d,mode=1777", size)
	if inodes > 0 {
		opts += fmt.Sprintf(",nr_inodes=%d", inodes)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if noexec {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount private /tmp: %w", err)
	}
	return nil
}

// bindWorkspace attaches the workspace's detached mount (fd ws, no sub-mounts) at dst; parents
// made here exist only in the call's view, and the tool must be able to traverse them.
func bindWorkspace(ws int, dst, name string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("workspace mount point %s: %w", name, err)
	}
	if err := unix.MoveMount(ws, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach workspace %s: %w", name, err)
	}
	// Its flags (nosuid, nodev, noexec unless exec is granted) and its idmap were set by the
	// launcher: a remount here would replace them.
	return nil
}

// maskSubmounts covers each host mount point inside the workspace (under root) with an empty
// read-only tmpfs.
func maskSubmounts(root string, masked []string) error {
	for _, m := range masked {
		if err := unix.Mount("berm-masked", filepath.Join(root, m), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
			return fmt.Errorf("mask sub-mount %s of the workspace: %w", m, err)
		}
	}
	return nil
}

// bindInto binds a host path (directory or file) at dst, read-only and nosuid when asked.
func bindInto(src, dst string, readOnly bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if st.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else {
		if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("bind %s: mount point: %w", src, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if !strings.HasPrefix(src, "/dev/") {
		flags |= unix.MS_NODEV
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", src, err)
	}
	return nil
}

// loopbackUp brings the call's lo up. The interface ioctls are the device layer's, reached
// through any socket: a unix one needs no inet socket, which berm's cgroup hooks refuse to a
// cgroup not registered as a call yet.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
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
