package runcli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
)

// DefaultIdleExit is how long a bermd started on demand waits for a next call: long enough
// for an agent's burst of tool calls, short enough not to linger (as build servers do).
const DefaultIdleExit = 5 * time.Minute

// daemonDefault is --daemon's default: $BERM_DAEMON (never: always the embedded agent), or auto.
func daemonDefault(c Caller) string {
	if v, _ := c.LookupEnv("BERM_DAEMON"); v != "" {
		return v
	}
	return "auto"
}

func validDaemon(v string) bool {
	switch v {
	case "auto", "running", "never", "required":
		return true
	}
	return false
}

// callerLock is held shared from before this call looks for bermd until the process exits:
// a bermd started on demand does not leave while a caller may be about to reach it.
var callerLock *os.File

// ViaDaemon says whether bermd runs this call. With --daemon auto and no bermd running, it
// starts one on demand (which exits when idle): the embedded agent loads the eBPF programs
// on every call, bermd once. Embedded: --daemon never, --state-dir (this journal), or --rules
// and --no-rules, which only the embedded agent honours; or a bermd that could not start.
func (o *Options) ViaDaemon() bool {
	if o.Daemon == "never" || (o.StateDirGiven && o.Daemon != "required") {
		return false
	}
	callerLock = lockFile(callproto.CallerLock(o.Socket), unix.LOCK_SH)
	if o.Daemon == "required" {
		return true
	}
	// The connection that finds a running bermd is the call's (Remote).
	if c, err := callproto.Dial(o.Socket); err == nil {
		o.conn = c
		return true
	}
	if o.Daemon != "auto" || len(o.Rules) > 0 || o.NoRules || callerLock == nil {
		return false
	}
	return o.startDaemon()
}

// lockFile opens (creating) and flocks a root-only lock file; nil when it cannot.
func lockFile(path string, how int) *os.File {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil
	}
	return f
}

// startDaemon starts bermd (beside this binary) detached, and waits until it answers. One
// caller starts it; others that found none wait on the start lock and then find it.
func (o *Options) startDaemon() bool {
	start := lockFile(o.Socket+".start.lock", unix.LOCK_EX)
	if start == nil {
		return false
	}
	defer start.Close()
	if callproto.Available(o.Socket) {
		return true
	}
	self, err := os.Executable()
	if err != nil {
		return false
	}
	bermd := filepath.Join(filepath.Dir(self), "bermd")
	if st, err := os.Stat(bermd); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return false // installed without bermd: the embedded agent, as before
	}
	idle := idleExit()
	fmt.Fprintf(o.MessageWriter(), "berm: starting bermd (exits after %s idle)\n", shortDuration(idle))
	logPath := filepath.Join(filepath.Dir(o.Socket), "bermd.log")
	if err := spawnDaemon(bermd, o.Socket, idle, logPath); err != nil {
		fmt.Fprintf(o.MessageWriter(), "berm: bermd did not start (%v; its log: %s): running this call with the agent embedded\n", err, logPath)
		return false
	}
	return true
}

// spawnDaemon starts bermd in its own session (the caller's terminal signals do not reach
// it), with no stdio of the caller's (a caller reading our output to its end must not wait
// for bermd), and waits until its socket answers.
func spawnDaemon(bermd, socket string, idle time.Duration, logPath string) error {
	// The log of the latest bermd started on demand; root-only, as its socket. Never through
	// a symlink: --socket may name a directory others can write to.
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	// bermd outlives this call by minutes: it must not keep what the caller's parents left
	// open without close-on-exec (a pipe a caller reads to its end, a held flock).
	closeInheritedOnExec()
	abs, err := filepath.Abs(socket)
	if err != nil {
		return err
	}
	args := []string{"bermd", "--socket", abs, "--idle-exit", idle.String(), "--metrics", ""}
	p, err := os.StartProcess(bermd, args, &os.ProcAttr{
		// Not the caller's directory: a daemon that stays would keep its file system busy.
		Dir:   "/",
		Files: []*os.File{null, logf, logf},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() {
		st, err := p.Wait()
		if err == nil {
			err = errors.New(st.String())
		}
		exited <- err
	}()
	// Loading the eBPF programs takes a few hundred ms; a loaded machine, longer.
	deadline := time.Now().Add(30 * time.Second)
	for !callproto.Available(socket) {
		select {
		case err := <-exited:
			return fmt.Errorf("bermd exited: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("bermd did not answer within 30s")
		}
	}
	return nil
}

// idleExit is $BERM_IDLE_EXIT (a Go duration like 30s or 10m), or DefaultIdleExit.
func idleExit() time.Duration {
	v := os.Getenv("BERM_IDLE_EXIT")
	if v == "" {
		return DefaultIdleExit
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		fmt.Fprintf(os.Stderr, "berm: warning: BERM_IDLE_EXIT=%q is not a positive duration like 30s or 10m: using %s\n", v, shortDuration(DefaultIdleExit))
		return DefaultIdleExit
	}
	return d
}

// shortDuration prints 5m for 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
func closeInheritedOnExec() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
