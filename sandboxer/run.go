// Package sandboxer launches one tool call: its own cgroup (placed there at clone time, so
// not one instruction runs untraced), its own mount, pid, ipc, uts, cgroup and network
// namespaces, resource caps, a private /tmp, the workspace as working directory, a clean
// environment and no_new_privs. At the end every process of the call is killed and its
// cgroup removed.
package sandboxer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/policy"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

// Spec describes one call.
type Spec struct {
	CallID, Tool, Tenant string
	Argv                 []string
	Workspace            string // bind-mounted read-write, the working directory
	Env                  []string
	UID, GID             uint32
	Limits               event.Limits
	// Policy is the call's ToolPolicy (policy.Strict() by default). It is compiled for this
	// call's workspace before anything starts; a policy that does not compile does not run.
	Policy         *policy.Policy
	Traced         []uint32 // syscalls with individual events, on top of the policy's
	Stdin          *os.File
	Stdout, Stderr io.Writer
	// Init is the sandbox init binary: berm-init, or berm itself (re-executed as berm-init).
	Init string
	// PolicyFile, when set, is watched while the call runs: a change to its network section
	// is applied to the running call atomically (other sections apply to the next call).
	PolicyFile string
}

// DefaultLimits are the caps of a call that names none: modest, never "unlimited".
var DefaultLimits = event.Limits{
	MemoryBytes: 512 << 20,
	Pids:        128,
	CPUs:        1,
	WallTime:    10 * time.Minute,
	OutputBytes: 64 << 20,
	TmpBytes:    256 << 20,
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName checks a tool, tenant or call id: they name cgroups and files.
func ValidName(field, v string) error {
	if !nameRE.MatchString(v) {
		return fmt.Errorf("%s %q: expected 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit", field, v)
	}
	return nil
}

func (s *Spec) validate() error {
	for _, f := range []struct{ name, v string }{{"call id", s.CallID}, {"tool", s.Tool}, {"tenant", s.Tenant}} {
		if err := ValidName(f.name, f.v); err != nil {
			return err
		}
	}
	if len(s.Argv) == 0 {
		return errors.New("no command to run")
	}
	if s.Policy == nil {
		return errors.New("no policy: every call runs under one (the built-in strict policy by default)")
	}
	l := s.Limits
	if l.MemoryBytes <= 0 || l.Pids <= 0 || l.CPUs <= 0 || l.WallTime <= 0 || l.OutputBytes <= 0 || l.TmpBytes <= 0 {
		return fmt.Errorf("every resource cap must be positive: %+v", l)
	}
	st, err := os.Stat(s.Workspace)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", s.Workspace)
	}
	return nil
}

// Outcome is a finished call.
type Outcome struct {
	Record     *event.CallRecord
	ExitStatus int // what `berm run` exits with
}

// Run runs the call to its end. The error is about berm (setup, recording); the tool's own
// failure is in the record.
func Run(spec Spec, rec Recorder) (*Outcome, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	env, err := compile(&spec)
	if err != nil {
		return nil, err
	}
	// Calls whose launcher was killed left their (empty) cgroups behind: clear them first.
	if _, err := cgroup.ReapStale(); err != nil {
		fmt.Fprintf(os.Stderr, "berm: warning: stale calls: %v\n", err)
	}
	layout, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	cg, err := cgroup.Create(layout, spec.Tenant, spec.CallID, cgroup.Limits{
		MemoryBytes: spec.Limits.MemoryBytes, Pids: spec.Limits.Pids, CPUs: spec.Limits.CPUs,
	})
	if err != nil {
		return nil, err
	}
	lease, err := cg.TakeLease(spec.Tenant, spec.CallID)
	if err != nil {
		cg.Remove()
		return nil, err
	}
	// The lease goes only once the cgroups are gone: a launcher killed in between leaves a
	// lease the next one reaps.
	defer func() {
		if cg.Remove() == nil {
			lease.Release()
		}
	}()

	host, _ := os.Hostname()
	// The agent adds its own layers (tracing, cgroup sock hooks, BPF LSM) when it begins.
	layers := []string{"cgroup", "namespaces", "no_new_privs"}
	if !env.init.HostRoot {
		layers = append(layers, "mount")
	}
	if env.init.Landlock != nil {
		layers = append(layers, fmt.Sprintf("landlock-abi%d", env.compiled.LandlockABI))
	}
	if len(env.init.Seccomp) > 0 {
		layers = append(layers, "seccomp")
	}
	if env.compiled.Mode == policy.Audit {
		layers = append(layers, "audit-mode")
	}
	start := event.CallStart{
		CallID: spec.CallID, Tool: spec.Tool, Tenant: spec.Tenant, Argv: spec.Argv,
		Policy: env.compiled.Name, PolicyHash: env.compiled.Hash(), Start: time.Now(), CgroupID: cg.ID,
		Node: host, Layers: layers,
	}
	call, err := rec.Begin(start, agent.CallOptions{
		Traced: env.traced, Policy: env.callPolicy, CgroupDir: cg.V2,
		Network: env.compiled.Isolation == policy.NetworkHostFiltered,
	})
	if err != nil {
		return nil, err
	}
	l := &launch{spec: spec, cg: cg, call: call, env: env}
	res := l.run()
	record, err := call.End(res)
	if record == nil {
		return nil, err
	}
	return &Outcome{Record: record, ExitStatus: res.ExitStatus}, err
}

type launch struct {
	spec Spec
	cg   *cgroup.Cgroup
	call CallRecorder
	env  *callEnv

	mu     sync.Mutex
	reason event.EndReason // first cap or interruption that ended the call
	detail string
	output atomic.Int64
}

// stop ends the call for a reason of berm's (a cap, an interruption), once.
func (l *launch) stop(reason event.EndReason, detail string, lim *event.Limit) {
	l.mu.Lock()
	first := l.reason == ""
	if first {
		l.reason, l.detail = reason, detail
	}
	l.mu.Unlock()
	if !first {
		return
	}
	if lim != nil {
		l.call.Emit(event.Event{Kind: event.KindLimit, Limit: lim})
	}
	_ = l.cg.Kill()
}

func (l *launch) run() agent.Result {
	spec := l.spec
	res := agent.Result{Limits: spec.Limits}
	fail := func(err error) agent.Result {
		_ = l.cg.KillAndWait(5 * time.Second)
		res.Reason, res.Detail, res.ExitStatus = event.EndSetupFailed, err.Error(), 125
		return res
	}

	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		return fail(err)
	}
	defer statR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer goW.Close()
	cgfd, err := l.cg.OpenFD()
	if err != nil {
		return fail(err)
	}
	stdin := spec.Stdin
	if stdin == nil {
		stdin, _ = os.Open(os.DevNull)
	}
	flags := unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	if l.env.init.NewNet {
		flags |= unix.CLONE_NEWNET
	}
	cmd := &exec.Cmd{
		Path: spec.Init, Args: []string{sandboxinit.Arg0}, Env: []string{},
		Stdin: stdin, Stdout: outW, Stderr: errW,
		ExtraFiles: []*os.File{cfgR, statW, goR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  uintptr(flags),
			UseCgroupFD: true, CgroupFD: cgfd,
			// If the launcher dies, the init dies, and with it the call's pid namespace.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	unix.Close(cgfd)
	cfgR.Close()
	statW.Close()
	goR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return fail(fmt.Errorf("start sandbox init: %w", err))
	}

	var copiers sync.WaitGroup
	copiers.Add(2)
	go l.copyOutput(&copiers, outR, spec.Stdout)
	go l.copyOutput(&copiers, errR, spec.Stderr)
	// abort ends a call whose init started but could not be set up.
	abort := func(err error) agent.Result {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		copiers.Wait()
		return fail(err)
	}

	if err := json.NewEncoder(cfgW).Encode(l.env.init); err != nil {
		return abort(fmt.Errorf("configure sandbox init: %w", err))
	}
	cfgW.Close()
	// While the init sets up mounts, Landlock and seccomp, place it in the v1 cgroups (a
	// migration costs a few ms on v1); only then may it start the tool.
	if err := l.cg.JoinV1(cmd.Process.Pid); err != nil {
		return abort(err)
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		return abort(fmt.Errorf("start the call: %w", err))
	}
	goW.Close()

	done := make(chan struct{})
	go l.watch(cmd.Process.Pid, done)
	if spec.PolicyFile != "" {
		go l.reloadPolicy(done)
	}
	waitErr := cmd.Wait()
	close(done)

	var st sandboxinit.Status
	statData, _ := io.ReadAll(statR)
	_ = json.Unmarshal(statData, &st)

	// Whatever the tool left behind (daemons, setsid grandchildren) goes now.
	if err := l.cg.KillAndWait(10 * time.Second); err != nil {
		res.Detail = err.Error()
	}
	copiers.Wait()
	ev := l.cg.Events()
	stats := l.cg.Stats()
	res.CPUTimeNs, res.PeakMemory, res.OutputBytes = stats.CPUTimeNs, stats.PeakMemory, l.output.Load()

	l.mu.Lock()
	reason, detail := l.reason, l.detail
	l.mu.Unlock()
	if reason == "" && ev.OOMKills > 0 {
		// The OOM killer was faster than the watcher.
		reason, detail = event.EndMemoryLimit, fmt.Sprintf("memory cap of %d bytes", spec.Limits.MemoryBytes)
		l.call.Emit(event.Event{Kind: event.KindLimit, Limit: &event.Limit{Resource: "memory", Limit: spec.Limits.MemoryBytes}})
	}
	switch {
	case reason != "":
		res.Reason, res.Detail = reason, detail
		res.ExitSignal, res.ExitStatus = int(unix.SIGKILL), 128+int(unix.SIGKILL)
		if st.Exited && reason == event.EndInterrupted {
			res.ExitSignal, res.ExitCode, res.ExitStatus = 0, st.Code, st.Code
		}
	case st.Error != "" && !st.Started:
		res.Reason, res.Detail = event.EndSetupFailed, st.Error
		res.ExitCode, res.ExitStatus = st.Code, st.Code
		if res.ExitStatus == 0 {
			res.ExitStatus = 125
		}
	case st.Signal != 0:
		res.Reason, res.ExitSignal, res.ExitStatus = event.EndSignal, st.Signal, 128+st.Signal
		res.Detail = unix.SignalName(syscall.Signal(st.Signal))
	case st.Exited:
		res.Reason, res.ExitCode, res.ExitStatus = event.EndExit, st.Code, st.Code
	default:
		// The init died without a word: killed from outside.
		res.Reason, res.ExitSignal, res.ExitStatus = event.EndSignal, int(unix.SIGKILL), 128+int(unix.SIGKILL)
		res.Detail = fmt.Sprintf("sandbox init ended without a status: %v", waitErr)
	}
	return res
}

func (l *launch) copyOutput(wg *sync.WaitGroup, r *os.File, w io.Writer) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	limit := l.spec.Limits.OutputBytes
	for {
		n, err := r.Read(buf)
		if n > 0 {
			total := l.output.Add(int64(n))
			if over := total - limit; over > 0 {
				// Pass through what fits, then stop the call.
				if keep := int64(n) - over; keep > 0 && w != nil {
					_, _ = w.Write(buf[:keep])
				}
				l.stop(event.EndOutputLimit, fmt.Sprintf("output cap of %d bytes", limit),
					&event.Limit{Resource: "output", Limit: limit})
				_, _ = io.Copy(io.Discard, r)
				return
			}
			if w != nil {
				_, _ = w.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// watch enforces the caps the kernel does not end a call for: wall time, a refused fork, an
// OOM kill of one process, a full /tmp; and turns SIGINT/SIGTERM into an orderly end.
func (l *launch) watch(initPid int, done <-chan struct{}) {
	lim := l.spec.Limits
	timer := time.NewTimer(lim.WallTime)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	tmp := "/proc/" + strconv.Itoa(initPid) + "/root/tmp"
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			l.stop(event.EndInterrupted, "berm run received "+s.String(), nil)
		case <-timer.C:
			l.stop(event.EndTimeout, fmt.Sprintf("wall-time cap of %s", lim.WallTime),
				&event.Limit{Resource: "wall_time", Limit: int64(lim.WallTime)})
		case <-tick.C:
			ev := l.cg.Events()
			if ev.OOMKills > 0 {
				l.stop(event.EndMemoryLimit, fmt.Sprintf("memory cap of %d bytes", lim.MemoryBytes),
					&event.Limit{Resource: "memory", Limit: lim.MemoryBytes})
			}
			if ev.PidsMax > 0 {
				l.stop(event.EndPidsLimit, fmt.Sprintf("process cap of %d", lim.Pids),
					&event.Limit{Resource: "pids", Limit: lim.Pids, Detail: fmt.Sprintf("%d forks refused", ev.PidsMax)})
			}
			var fs unix.Statfs_t
			if unix.Statfs(tmp, &fs) == nil && fs.Type == unix.TMPFS_MAGIC && fs.Blocks > 0 && fs.Bavail == 0 {
				l.stop(event.EndTmpLimit, fmt.Sprintf("/tmp cap of %d bytes", lim.TmpBytes),
					&event.Limit{Resource: "tmp", Limit: lim.TmpBytes})
			}
		}
	}
}
