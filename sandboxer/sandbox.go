package sandboxer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// sandbox is a sandbox init started in its own cgroups (v2 leaf entered at clone time, v1
// joined) and fresh namespaces, waiting for its call's configuration. Everything about it is
// independent of the call it will run: it is started for a call (cold) or ahead of one (warm,
// see Pool). It runs exactly one call.
type sandbox struct {
	tenant string
	newNet bool
	// prepared is the root a warm sandbox's init built and pivoted into before its call.
	prepared *sandboxinit.RootPlan
	cg       *cgroup.Cgroup
	lease    *cgroup.Lease
	ids      *hostIDs // the tool's host uid and gid, this sandbox's alone
	// idmap maps a workspace owner to ids, prepared ahead for a warm sandbox (-1: none).
	idmap              int
	idmapUID, idmapGID uint32
	// idmapDone is closed when the idmap started with the sandbox is made (idmapErr).
	idmapDone chan struct{}
	idmapErr  error
	stage     string // the stage's binary, beside the init's: it makes idmap
	cmd       *exec.Cmd
	cfg       int      // the launcher's end of the config socket (config, then the caller's stdin)
	stat      *os.File // the init's status, when the tool has ended
	out       *os.File // the init's (and the tool's) stdout and stderr
	errR      *os.File
	mntns     *os.File
	// joined reports the v1 joins; joinErr keeps their outcome once read.
	joined  chan error
	joinErr error
}

// startSandbox creates the cgroups named name under tenant and starts the init in them.
// A warm sandbox's init is given prepare, the root its tenant's last call had, to build ahead.
// owner, when known, is the workspace owner whose idmap (a user namespace, a process to
// start) is made beside the init's start rather than after it. tl, when not nil, is marked
// at the end of each step (a cold launch's).
func startSandbox(layout *cgroup.Layout, initPath, tenant, name string, lim cgroup.Limits, newNet bool, prepare *sandboxinit.RootPlan, owner *[2]uint32, tl *Timeline) (_ *sandbox, err error) {
	cg, err := cgroup.Create(layout, tenant, name, lim)
	if err != nil {
		return nil, err
	}
	tl.Mark("cgroup create")
	s := &sandbox{tenant: tenant, newNet: newNet, prepared: prepare, cg: cg, cfg: -1, idmap: -1, stage: filepath.Join(filepath.Dir(initPath), sandboxinit.StageBinary)}
	defer func() {
		if err != nil {
			s.discard()
		}
	}()
	if s.lease, err = cg.TakeLease(tenant, name); err != nil {
		return nil, err
	}
	if s.ids, err = ids.take(); err != nil {
		return nil, err
	}
	if owner != nil {
		s.idmapDone = make(chan struct{})
		go func(uid, gid uint32) {
			defer close(s.idmapDone)
			s.idmapErr = s.prepareIdmap(uid, gid)
		}(owner[0], owner[1])
	}
	tl.Mark("cgroup lease and ids")

	var toClose []*os.File
	defer func() {
		for _, f := range toClose {
			f.Close()
		}
	}()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("config socket: %w", err)
	}
	s.cfg = pair[0]
	cfgR := os.NewFile(uintptr(pair[1]), "config")
	toClose = append(toClose, cfgR)
	pipe := func(r **os.File) (*os.File, error) {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		*r = pr
		toClose = append(toClose, pw)
		return pw, nil
	}
	statW, err := pipe(&s.stat)
	if err != nil {
		return nil, err
	}
	outW, err := pipe(&s.out)
	if err != nil {
		return nil, err
	}
	errW, err := pipe(&s.errR)
	if err != nil {
		return nil, err
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	toClose = append(toClose, goR)
	closeGo := true
	defer func() {
		if closeGo {
			goW.Close()
		}
	}()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	toClose = append(toClose, devNull)
	cgfd, err := cg.OpenFD()
	if err != nil {
		return nil, err
	}
	defer unix.Close(cgfd)
	tl.Mark("pipes and cgroup fd")

	flags := unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	if newNet {
		flags |= unix.CLONE_NEWNET
	}
	s.cmd = &exec.Cmd{
		Path: initPath, Args: []string{sandboxinit.Arg0, sandboxinit.IDsArg(s.ids.UID, s.ids.GID)}, Env: []string{},
		Stdin: devNull, Stdout: outW, Stderr: errW,
		ExtraFiles: []*os.File{cfgR, statW, goR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  uintptr(flags),
			UseCgroupFD: true, CgroupFD: cgfd,
			// If the launcher dies, the init dies, and with it the call's pid namespace.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return nil, fmt.Errorf("start sandbox init: %w", err)
	}
	tl.Mark("clone init")
	if prepare != nil {
		if err := sandboxinit.SendFrame(s.cfg, sandboxinit.Message{Prepare: prepare, PrepareNet: newNet}); err != nil {
			return nil, fmt.Errorf("prepare sandbox init: %w", err)
		}
	}
	// Hold the call's mount namespace: when the init exits, the namespace's teardown (an
	// unmount of every mount in it, with RCU grace periods) then happens when the launcher lets
	// go of it, after the caller has its reply, not on the init's way out.
	if s.mntns, err = os.Open(fmt.Sprintf("/proc/%d/ns/mnt", s.cmd.Process.Pid)); err != nil {
		return nil, fmt.Errorf("hold the sandbox's mount namespace: %w", err)
	}
	tl.Mark("hold mount namespace")
	// On hybrid hosts the v1 controllers are joined while the call is being set up (a
	// migration costs milliseconds of RCU waits); the init may start the tool only after.
	// One byte on the go pipe tells the init it is in every cgroup of the call: only then does
	// it start the tool's stage (a warm init, ahead of its call), whose processes the
	// controllers must count.
	s.joined = make(chan error, 1)
	closeGo = false
	go func(pid int) {
		defer goW.Close()
		err := cg.JoinV1(pid)
		if err == nil {
			_, err = goW.Write([]byte{1})
		}
		s.joined <- err
	}(s.cmd.Process.Pid)
	return s, nil
}

// ready waits until the init is in every cgroup of the call.
func (s *sandbox) ready() error {
	if s.joined == nil {
		return nil
	}
	err := <-s.joined
	s.joined = nil
	s.joinErr = err
	return err
}

// configure hands the init its call with the tool's stdin and the workspace (a detached copy
// of its mount, see openWorkspace), and more files when the config says so (the pty's mount),
// and lets it go once it is in every cgroup of the call.
func (s *sandbox) configure(cfg *sandboxinit.Config, stdin *os.File, workspace int, more ...int) error {
	err := sandboxinit.SendFrame(s.cfg, sandboxinit.Message{Call: cfg}, append([]int{int(stdin.Fd()), workspace}, more...)...)
	if (len(cfg.Approvals) == 0 && !cfg.Hold) || err != nil {
		// With approvals the channel stays open: the approval listener comes back on it;
		// held, release's Start goes on it.
		unix.Close(s.cfg)
		s.cfg = -1
	}
	if err != nil {
		return fmt.Errorf("configure sandbox init: %w", err)
	}
	return s.ready()
}

// release lets an init configured with Hold start the tool's stage.
func (s *sandbox) release() error {
	err := sandboxinit.SendFrame(s.cfg, sandboxinit.Message{Start: true})
	unix.Close(s.cfg)
	s.cfg = -1
	if err != nil {
		return fmt.Errorf("start the call: %w", err)
	}
	return nil
}

// discard ends a sandbox that will not run (or has run) its call: its processes killed, its
// cgroups removed, its lease released.
func (s *sandbox) discard() error {
	var errs []error
	_ = s.waitIdmap()
	if s.cfg >= 0 {
		unix.Close(s.cfg)
		s.cfg = -1
	}
	if s.idmap >= 0 {
		unix.Close(s.idmap)
		s.idmap = -1
	}
	for _, f := range []*os.File{s.stat, s.out, s.errR, s.mntns} {
		if f != nil {
			f.Close()
		}
	}
	s.stat, s.out, s.errR, s.mntns = nil, nil, nil, nil
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	_ = s.ready()
	if err := s.cg.KillAndWait(5 * time.Second); err != nil {
		errs = append(errs, err)
	} else {
		// Nothing runs as its ids any more: another sandbox may have them.
		ids.release(s.ids)
		s.ids = nil
	}
	if err := s.cg.Remove(); err != nil {
		errs = append(errs, err)
	} else if s.lease != nil {
		s.lease.Release()
	}
	return errors.Join(errs...)
}

// prepareIdmap makes the user namespace that maps a workspace owner to the sandbox's ids.
func (s *sandbox) prepareIdmap(uid, gid uint32) error {
	fd, err := mappingUserns(s.stage, uid, s.ids.UID, gid, s.ids.GID)
	if err != nil {
		return err
	}
	s.idmap, s.idmapUID, s.idmapGID = fd, uid, gid
	return nil
}

// waitIdmap waits for the idmap started with the sandbox, if any, and says how it went.
func (s *sandbox) waitIdmap() error {
	if s.idmapDone == nil {
		return nil
	}
	<-s.idmapDone
	s.idmapDone = nil
	return s.idmapErr
}

// idmapFor returns the user namespace mapping the workspace's owner to the sandbox's ids: the
// prepared one when the owner is the one it was made for. The sandbox keeps it.
func (s *sandbox) idmapFor(uid, gid uint32) (int, error) {
	_ = s.waitIdmap() // one that failed is made again below
	if s.idmap >= 0 && (s.idmapUID != uid || s.idmapGID != gid) {
		unix.Close(s.idmap)
		s.idmap = -1
	}
	if s.idmap < 0 {
		if err := s.prepareIdmap(uid, gid); err != nil {
			return -1, err
		}
	}
	return s.idmap, nil
}
