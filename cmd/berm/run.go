package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/daemon"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/cgroup"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

type sizeFlag struct{ v *int64 }

func (s sizeFlag) String() string {
	if s.v == nil {
		return ""
	}
	return strconv.FormatInt(*s.v, 10)
}
func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

// parseSize reads 512Mi, 1G, 64k or a plain byte count.
func parseSize(v string) (int64, error) {
	mult := int64(1)
	num := v
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"K", 1000}, {"M", 1000 * 1000}, {"G", 1000 * 1000 * 1000}, {"k", 1 << 10}} {
		if strings.HasSuffix(v, u.suffix) {
			num, mult = strings.TrimSuffix(v, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("expected a positive size like 512Mi, 1G or 65536, got %q", v)
	}
	return n * mult, nil
}

func newCallID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "/var/lib/berm", "state directory (journal)")
	tool := fs.String("tool", "adhoc", "tool name")
	tenant := fs.String("tenant", "default", "tenant name")
	callID := fs.String("call-id", "", "call id (default: generated)")
	workspace := fs.String("workspace", "", "workspace directory, read-write and the working directory (default: a fresh empty one under /run/berm/workspaces, removed after the call)")
	policyFile := fs.String("policy", "", "policy file (default: the built-in policy)")
	timeout := fs.Duration("timeout", sandboxer.DefaultLimits.WallTime, "wall-time cap")
	summary := fs.String("summary", "", "write the call record as JSON to this file")
	lim := sandboxer.DefaultLimits
	fs.Var(sizeFlag{&lim.MemoryBytes}, "memory", "memory cap (e.g. 512Mi)")
	fs.Int64Var(&lim.Pids, "pids", lim.Pids, "process cap")
	fs.Float64Var(&lim.CPUs, "cpus", lim.CPUs, "CPU cap in cores")
	fs.Var(sizeFlag{&lim.OutputBytes}, "output-limit", "cap on stdout+stderr bytes")
	fs.Var(sizeFlag{&lim.TmpBytes}, "tmp-size", "size of the private /tmp")
	var envs, traced listFlag
	fs.Var(&envs, "env", "pass NAME from the caller's environment, or set NAME=VALUE (repeatable)")
	fs.Var(&traced, "trace-syscall", "also report this syscall one by one (repeatable)")
	user := fs.String("user", "", "UID[:GID] to run the tool as (default: the workspace's owner, or 65534 if root owns it)")
	daemonMode := fs.String("daemon", "auto", "auto: use bermd when it runs and --state-dir is not given; never; required")
	socket := fs.String("socket", daemon.DefaultSocket, "bermd socket")
	var rulePaths listFlag
	fs.Var(&rulePaths, "rules", "detection rule files or directories (default: the shipped ruleset; repeatable)")
	noRules := fs.Bool("no-rules", false, "evaluate no detection rules")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "berm run: no command; usage: berm run [flags] -- CMD [ARGS...]")
		return 2
	}
	if os.Geteuid() != 0 {
		return fail("run needs root (cgroups, namespaces, eBPF): try sudo")
	}
	lim.WallTime = *timeout
	if *callID == "" {
		*callID = newCallID()
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	explicitState := explicit["state-dir"]

	pol, err := loadRunPolicy(*policyFile, &lim, explicit)
	if err != nil {
		return fail("%v", err)
	}
	spec := sandboxer.Spec{
		CallID: *callID, Tool: *tool, Tenant: *tenant, Argv: argv, Limits: lim, Policy: pol, PolicyFile: *policyFile,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	for _, f := range []struct{ field, v string }{{"--call-id", spec.CallID}, {"--tool", spec.Tool}, {"--tenant", spec.Tenant}} {
		if err := sandboxer.ValidName(f.field, f.v); err != nil {
			return fail("%v", err)
		}
	}
	if spec.Init, err = initBinary(); err != nil {
		return fail("%v", err)
	}
	for _, n := range traced {
		nr, err := event.SyscallNumber(n)
		if err != nil {
			return fail("--trace-syscall: %v", err)
		}
		spec.Traced = append(spec.Traced, nr)
	}

	if *workspace == "" {
		// A root-controlled place (never a world-writable one like /var/tmp) whose parents the
		// tool's uid can traverse; the workspace itself is the tool's own.
		parent := "/run/berm/workspaces"
		if err := os.MkdirAll(parent, 0o711); err != nil {
			return fail("create workspace: %v", err)
		}
		_ = os.Chmod("/run/berm", 0o711)
		_ = os.Chmod(parent, 0o711)
		dir, err := os.MkdirTemp(parent, spec.CallID+"-")
		if err != nil {
			return fail("create workspace: %v", err)
		}
		defer os.RemoveAll(dir)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			return fail("chown workspace: %v", err)
		}
		*workspace = dir
	}
	if spec.Workspace, err = filepath.Abs(*workspace); err != nil {
		return fail("workspace: %v", err)
	}
	if spec.Workspace, err = filepath.EvalSymlinks(spec.Workspace); err != nil {
		return fail("workspace: %v", err)
	}
	if spec.UID, spec.GID, err = runUser(*user, spec.Workspace); err != nil {
		return fail("--user: %v", err)
	}
	if spec.Env, err = callEnv(envs, spec); err != nil {
		return fail("--env: %v", err)
	}

	var rec sandboxer.Recorder
	useDaemon := *daemonMode == "required" || (*daemonMode == "auto" && !explicitState && daemon.Available(*socket))
	if useDaemon {
		rec = sandboxer.Remote{Client: &daemon.Client{Socket: *socket, CgroupDir: cgroupDir}}
	} else {
		if *daemonMode != "auto" && *daemonMode != "never" {
			return fail("--daemon: expected auto, never or required, got %q", *daemonMode)
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ev, stopRules, err := loadRunRules(rulePaths, *noRules, log)
		if err != nil {
			return fail("%v", err)
		}
		defer stopRules()
		a, err := agent.New(agent.Config{StateDir: *stateDir, Logger: log, Rules: ev})
		if err != nil {
			return fail("load agent: %v", err)
		}
		defer a.Close()
		rec = sandboxer.Local{Agent: a}
	}
	out, err := sandboxer.Run(spec, rec)
	if out == nil {
		return fail("%v", err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: warning: %v\n", err)
	}
	r := out.Record
	if r.EndReason != event.EndExit {
		detail := ""
		if r.EndDetail != "" {
			detail = " (" + r.EndDetail + ")"
		}
		fmt.Fprintf(os.Stderr, "berm: call %s ended: %s%s, status %d\n", r.CallID, r.EndReason, detail, out.ExitStatus)
	}
	if d := r.Dropped; d.Kernel+d.User > 0 {
		fmt.Fprintf(os.Stderr, "berm: call %s: %d events were dropped (kernel %d, agent %d)\n", r.CallID, d.Kernel+d.User, d.Kernel, d.User)
	}
	if *summary != "" {
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*summary, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "berm: write summary: %v\n", err)
			if out.ExitStatus == 0 {
				return 1
			}
		}
	}
	return out.ExitStatus
}

// initBinary is berm-init beside this binary, or this binary (which serves as the init when
// re-executed under that name): the small one starts faster, once per call.
func initBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary: %w", err)
	}
	if p := filepath.Join(filepath.Dir(self), "berm-init"); isExecutable(p) {
		return p, nil
	}
	return self, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func cgroupDir(start event.CallStart) string {
	l, err := cgroup.Detect()
	if err != nil {
		return ""
	}
	return filepath.Join(l.V2, cgroup.Root, start.Tenant, start.CallID)
}

// runUser picks who the tool runs as: never root unless asked for by number.
func runUser(spec, workspace string) (uint32, uint32, error) {
	if spec != "" {
		u, g, hasG := strings.Cut(spec, ":")
		uid, err := strconv.ParseUint(u, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("expected UID[:GID] as numbers, got %q", spec)
		}
		gid := uid
		if hasG {
			if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
				return 0, 0, fmt.Errorf("expected UID[:GID] as numbers, got %q", spec)
			}
		}
		return uint32(uid), uint32(gid), nil
	}
	st, err := os.Stat(workspace)
	if err != nil {
		return 0, 0, err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid == 0 {
		return 65534, 65534, nil
	}
	return sys.Uid, sys.Gid, nil
}

// callEnv is the tool's whole environment: a fixed base, and what the caller named.
func callEnv(envs []string, spec sandboxer.Spec) ([]string, error) {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + spec.Workspace,
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"BERM_CALL_ID=" + spec.CallID,
		"BERM_TOOL=" + spec.Tool,
		"BERM_TENANT=" + spec.Tenant,
	}
	for _, e := range envs {
		name, val, set := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, " \x00") {
			return nil, fmt.Errorf("expected NAME or NAME=VALUE, got %q", e)
		}
		if !set {
			v, ok := os.LookupEnv(name)
			if !ok {
				return nil, fmt.Errorf("%s is not set in the caller's environment", name)
			}
			val = v
		}
		env = append(env, name+"="+val)
	}
	return env, nil
}
