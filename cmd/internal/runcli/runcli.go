// Package runcli is `berm run`'s command line: the flags, the call they describe (a
// callproto.Request resolved in the caller's context) and what berm prints and writes when
// the call has ended. Both berm binaries use it: the small front that hands calls to bermd,
// and berm-full, which runs them with the agent embedded. It links nothing heavy.
package runcli

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Options are `berm run`'s flags.
type Options struct {
	Request  callproto.Request
	StateDir string
	// StateDirGiven: an explicit --state-dir means this journal, so the embedded agent.
	StateDirGiven bool
	Summary       string
	// Quiet: none of berm's own lines about the ended call on stderr (how it ended, events
	// dropped, warnings): the tool's stderr is the tool's alone; --summary and berm timeline
	// have them.
	Quiet bool
	// Messages is where berm's own lines go (--messages FD|FILE): how the call ended, events
	// dropped, warnings, approvals waiting, bermd started; empty: stderr, beside the tool's.
	Messages string
	msgs     io.Writer // Messages opened (MessageWriter)
	Daemon   string    // auto, never, required
	Socket   string
	Rules    []string
	NoRules  bool
	// ApprovalWebhook and ApprovalWebhookSecret: the embedded run POSTs each approval
	// request there, HMAC-signed with the key in the file (bermd has flags of its own).
	ApprovalWebhook, ApprovalWebhookSecret string
	Envs                                   []string
	TracedNames                            []string
	workspace                              string
	// caller is the context the flags are read in: this process, or the one bermd parses
	// a bare invocation for (Invoke).
	caller Caller
	// conn is the connection to bermd ViaDaemon found it with, for Remote.
	conn *callproto.Conn
}

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
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s.v = n
	return nil
}

// ParseSize reads 512Mi, 1G, 64k or a plain byte count.
func ParseSize(v string) (int64, error) {
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

// Caller is the process berm run reads its flags for: what it prints a usage error to, its
// environment and working directory.
type Caller struct {
	Stderr    io.Writer
	LookupEnv func(string) (string, bool)
	Getwd     func() (string, error)
	// NonRoot: --tenant's default is DefaultTenant (empty: bermd picks the only tenant the
	// caller may run in), not "default".
	NonRoot       bool
	DefaultTenant string
	// WorkspaceByDaemon: with no --workspace, the request names none and bermd makes it.
	WorkspaceByDaemon bool
	// Elsewhere: the caller is another process (bermd reading a bare invocation): its file
	// descriptors are not this process's to check (--messages FD falls back to the Go front).
	Elsewhere bool
}

// thisProcess is the caller when berm run is this process.
var thisProcess = Caller{Stderr: os.Stderr, LookupEnv: os.LookupEnv, Getwd: os.Getwd}

// abs is filepath.Abs in the caller's working directory.
func (c Caller) abs(p string) (string, error) {
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := c.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Join(wd, p), nil
}

// Parse reads the flags. A usage error has been printed when it returns an error.
// ErrHelpRequested: -h or --help was given and the usage printed; the command succeeded
// (exit 0). flag.ErrHelp from Parse means a usage error already printed (exit 2).
var ErrHelpRequested = errors.New("help requested")

func Parse(args []string) (*Options, error) {
	c := thisProcess
	if os.Geteuid() != 0 {
		c.NonRoot, c.WorkspaceByDaemon = true, true
	}
	return parseFor(args, c)
}

func parseFor(args []string, c Caller) (*Options, error) {
	o := &Options{caller: c}
	r := &o.Request
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/berm", "state directory (journal)")
	fs.StringVar(&r.Tool, "tool", "adhoc", "tool name")
	defTenant := "default"
	if c.NonRoot {
		defTenant = c.DefaultTenant
	}
	fs.StringVar(&r.Tenant, "tenant", defTenant, "tenant name (default: default; for a caller that is not root, the only tenant bermd lets it run in)")
	fs.StringVar(&r.CallID, "call-id", "", "call id (default: generated)")
	fs.StringVar(&o.workspace, "workspace", "", "workspace directory, read-write and the working directory (default: a fresh empty one under /run/berm/workspaces, removed after the call)")
	fs.StringVar(&r.PolicyFile, "policy", "", "policy file (default: the built-in policy)")
	fs.StringVar(&o.Summary, "summary", "", "write the call record as JSON to this file")
	fs.BoolVar(&o.Quiet, "quiet", false, "print none of berm's own lines about the ended call on stderr (the record has them: --summary, berm timeline)")
	fs.StringVar(&o.Messages, "messages", "", "write berm's own lines (how the call ended, warnings, approvals waiting) to this file descriptor number or file, appended, not to stderr: the tool's stderr holds only the tool's bytes")
	// Caps not given as flags are the policy's (policy.Limits), resolved where the policy is
	// loaded: zero here means "the policy's".
	lim := &r.Limits
	fs.DurationVar(&lim.WallTime, "timeout", lim.WallTime, "wall-time cap (default: the policy's)")
	fs.Var(sizeFlag{&lim.MemoryBytes}, "memory", "memory cap, e.g. 512Mi (default: the policy's)")
	fs.Int64Var(&lim.Pids, "pids", lim.Pids, "process cap (default: the policy's)")
	fs.Float64Var(&lim.CPUs, "cpus", lim.CPUs, "CPU cap in cores (default: the policy's)")
	fs.Var(sizeFlag{&lim.OutputBytes}, "output-limit", "cap on stdout+stderr bytes (default: the policy's)")
	fs.Var(sizeFlag{&lim.TmpBytes}, "tmp-size", "size of the private /tmp (default: the policy's)")
	fs.Var((*listFlag)(&o.Envs), "env", "pass NAME from the caller's environment, or set NAME=VALUE (repeatable)")
	fs.Var((*listFlag)(&o.TracedNames), "trace-syscall", "also report this syscall one by one (repeatable)")
	fs.StringVar(&o.Daemon, "daemon", daemonDefault(c), "auto: use bermd, started on demand when none runs (not with --state-dir); running: use bermd only when it runs; never; required (default: $BERM_DAEMON, else auto)")
	fs.StringVar(&o.Socket, "socket", callproto.DefaultSocket, "bermd socket")
	fs.Var((*listFlag)(&o.Rules), "rules", "detection rule files or directories (default: the shipped ruleset; repeatable; embedded agent only)")
	fs.BoolVar(&o.NoRules, "no-rules", false, "evaluate no detection rules (embedded agent only)")
	fs.StringVar(&o.ApprovalWebhook, "approval-webhook", "", "POST each approval request to this URL, signed (embedded agent only; bermd has --approval-webhook)")
	fs.StringVar(&o.ApprovalWebhookSecret, "approval-webhook-secret", "", "file holding the webhook's HMAC-SHA256 key (root-only; required with --approval-webhook)")
	fs.StringVar(&r.DNSUpstream, "dns-upstream", "", "DNS server the call's allowed queries go to, ADDR or ADDR:PORT (default: bermd's --dns-upstream, else the host's resolv.conf)")
	fs.StringVar(&r.TraceParent, "traceparent", "", "the caller's W3C trace context (00-TRACEID-SPANID-FLAGS): the call's OpenTelemetry span is its child")
	// The flag package would print its error and the whole usage, and the caller the error
	// again: one line for a bad flag, the usage only when asked for.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.Stderr, "usage: berm run [flags] -- CMD [ARGS...]\n\nflags:\n")
		fs.SetOutput(c.Stderr)
		fs.PrintDefaults()
		return nil, ErrHelpRequested
	} else if err != nil {
		fmt.Fprintf(c.Stderr, "berm run: %v (berm run -h lists the flags)\n", err)
		return nil, flag.ErrHelp
	}
	r.Argv = fs.Args()
	if len(r.Argv) == 0 {
		fmt.Fprintln(c.Stderr, "berm run: no command; usage: berm run [flags] -- CMD [ARGS...]")
		return nil, flag.ErrHelp
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "state-dir":
			o.StateDirGiven = true
		case "memory", "pids", "cpus", "output-limit", "tmp-size", "timeout":
			r.Explicit = append(r.Explicit, f.Name)
		}
	})
	if !validDaemon(o.Daemon) {
		fmt.Fprintf(c.Stderr, "berm run: --daemon (or BERM_DAEMON): expected auto, running, never or required, got %q\n", o.Daemon)
		return nil, flag.ErrHelp
	}
	if err := event.ValidTraceParent(r.TraceParent); err != nil {
		fmt.Fprintf(c.Stderr, "berm run: --traceparent: %v\n", err)
		return nil, flag.ErrHelp
	}
	if err := checkMessages(o.Messages, c.Elsewhere); err != nil {
		fmt.Fprintf(c.Stderr, "berm run: --messages: %v\n", err)
		return nil, flag.ErrHelp
	}
	if r.CallID == "" {
		r.CallID = newCallID()
	}
	if r.PolicyFile != "" {
		abs, err := c.abs(r.PolicyFile)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		r.PolicyFile = abs
	}
	return o, nil
}

// checkMessages refuses a --messages that names nothing: an empty path, or a descriptor
// number (0-2 are the tool's stdio) that is not open.
func checkMessages(m string, elsewhere bool) error {
	if m == "" {
		return nil
	}
	if fd, err := strconv.Atoi(m); err == nil {
		if fd < 0 {
			return fmt.Errorf("expected a file descriptor number or a file, got %q", m)
		}
		if elsewhere {
			return nil
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("file descriptor %d is not open", fd)
		}
	}
	return nil
}

// MessageWriter is where berm's own lines go: stderr, or --messages opened in this process
// (a descriptor it inherited, or a file opened for appending, created 0600).
func (o *Options) MessageWriter() io.Writer {
	if o.msgs != nil {
		return o.msgs
	}
	o.msgs = os.Stderr
	if o.Messages == "" {
		return o.msgs
	}
	if fd, err := strconv.Atoi(o.Messages); err == nil {
		// Not the tool's to inherit (the sandbox init closes what it did not open, too).
		unix.CloseOnExec(fd)
		o.msgs = os.NewFile(uintptr(fd), "messages")
		return o.msgs
	}
	// O_NONBLOCK: a FIFO nobody reads is refused (ENXIO), not waited on forever.
	// O_NOFOLLOW: a symlink planted where the file is named (a workspace a tool wrote) does
	// not take berm's lines, as root, into the file it points at.
	f, err := os.OpenFile(o.Messages, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: --messages: %v (berm's lines go to stderr)\n", err)
		return o.msgs
	}
	o.msgs = f
	return o.msgs
}

// UseDaemon says whether a running bermd runs this call (see ViaDaemon for one started on
// demand).
func (o *Options) UseDaemon() bool {
	return o.Daemon == "required" || ((o.Daemon == "auto" || o.Daemon == "running") && !o.StateDirGiven && callproto.Available(o.Socket))
}

func newCallID() string {
	// getrandom itself: crypto/rand would link (and initialise, on every call) the FIPS
	// module and math/big for four bytes that need only be unlikely to repeat.
	b := make([]byte, 4)
	_, _ = unix.Getrandom(b, 0)
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b)
}

// Resolve completes the request in the caller's context: the workspace (made when none was
// given; the returned cleanup removes it), who the tool runs as, its environment, the
// syscalls traced one by one.
func (o *Options) Resolve() (cleanup func(), err error) {
	r := &o.Request
	cleanup = func() {}
	for _, n := range o.TracedNames {
		nr, err := event.SyscallNumber(n)
		if err != nil {
			return cleanup, fmt.Errorf("--trace-syscall: %w", err)
		}
		r.Traced = append(r.Traced, nr)
	}
	ws := o.workspace
	if ws == "" && o.caller.WorkspaceByDaemon {
		// A caller that is not root cannot make one where bermd keeps them: bermd does
		// (callproto: an empty workspace).
		r.Workspace = ""
		if r.Env, err = callEnv(o.Envs, r, o.caller.LookupEnv); err != nil {
			return cleanup, fmt.Errorf("--env: %w", err)
		}
		return cleanup, nil
	}
	if ws == "" {
		dir, rm, err := FreshWorkspace(r.CallID)
		cleanup = rm
		if err != nil {
			return cleanup, err
		}
		ws = dir
	}
	if ws, err = o.caller.abs(ws); err != nil {
		return cleanup, fmt.Errorf("workspace: %w", err)
	}
	// Not resolved here: the launcher resolves it once, refusing a symlink planted to
	// redirect the call, and holds it open from then on.
	r.Workspace = ws
	if r.Env, err = callEnv(o.Envs, r, o.caller.LookupEnv); err != nil {
		return cleanup, fmt.Errorf("--env: %w", err)
	}
	return cleanup, nil
}

// FreshWorkspace makes a call's own empty workspace: in a root-controlled place (never a
// world-writable one like /var/tmp) whose parents the tool's uid can traverse, owned by
// nobody; cleanup removes it.
func FreshWorkspace(callID string) (dir string, cleanup func(), err error) {
	cleanup = func() {}
	parent := "/run/berm/workspaces"
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return "", cleanup, fmt.Errorf("create workspace: %w", err)
	}
	_ = os.Chmod("/run/berm", 0o711)
	_ = os.Chmod(parent, 0o711)
	dir, err = os.MkdirTemp(parent, callID+"-")
	if err != nil {
		return "", cleanup, fmt.Errorf("create workspace: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := os.Chown(dir, 65534, 65534); err != nil {
		return "", cleanup, fmt.Errorf("chown workspace: %w", err)
	}
	return dir, cleanup, nil
}

// callEnv is the tool's whole environment: a fixed base, and what the caller named.
func callEnv(envs []string, r *callproto.Request, lookup func(string) (string, bool)) ([]string, error) {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + r.Workspace,
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"BERM_CALL_ID=" + r.CallID,
		"BERM_TOOL=" + r.Tool,
		"BERM_TENANT=" + r.Tenant,
	}
	for _, e := range envs {
		name, val, set := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, " \x00") {
			return nil, fmt.Errorf("expected NAME or NAME=VALUE, got %q", e)
		}
		if !set {
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("%s is not set in the caller's environment", name)
			}
			val = v
		}
		env = append(env, name+"="+val)
	}
	return env, nil
}

// Finish prints what the caller should know about the ended call, writes --summary, and
// returns berm run's exit status.
func (o *Options) Finish(r *event.CallRecord, status int, warning string) int {
	end := callEnd{CallID: r.CallID, EndReason: r.EndReason, EndDetail: r.EndDetail, Dropped: r.Dropped}
	return o.finish(end, func() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }, status, warning)
}

// finish is Finish, from the fields it prints and the record's --summary text.
func (o *Options) finish(r callEnd, summary func() ([]byte, error), status int, warning string) int {
	if !o.Quiet {
		o.MessageWriter().Write(endNotes(r, status, warning))
	}
	if o.Summary != "" {
		data, err := summary()
		if err == nil {
			err = os.WriteFile(o.Summary, append(data, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(o.MessageWriter(), "berm: write summary: %v\n", err)
			if status == 0 {
				return 1
			}
		}
	}
	return status
}

// endNotes are the lines berm run prints about an ended call.
func endNotes(r callEnd, status int, warning string) []byte {
	var b []byte
	if warning != "" {
		b = fmt.Appendf(b, "berm: warning: %s\n", warning)
	}
	if r.EndReason != event.EndExit {
		detail := ""
		if r.EndDetail != "" {
			detail = " (" + r.EndDetail + ")"
		}
		b = fmt.Appendf(b, "berm: call %s ended: %s%s, status %d\n", r.CallID, r.EndReason, detail, status)
	}
	if d := r.Dropped; d.Kernel+d.User > 0 {
		b = fmt.Appendf(b, "berm: call %s: %d events were dropped (kernel %d, agent %d)\n", r.CallID, d.Kernel+d.User, d.Kernel, d.User)
	}
	return b
}
