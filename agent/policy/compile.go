package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
)

// CompileEnv is what a policy is compiled against: the call's own paths and the kernel.
type CompileEnv struct {
	Workspace   string // host path of the call's workspace (${WORKSPACE}); must exist
	Tmp         string // host path that becomes the call's private /tmp (${TMP}); must exist
	LandlockABI int    // from landlock.Probe; 0 means landlock.MaxABI
	// MountInfo is the text of /proc/self/mountinfo of the mount namespace the call will run
	// in; empty means read the current one.
	MountInfo string
}

// Compiled is a policy in the form the enforcement layers load. Every denial a layer reports
// carries a rule id, an index into Rules plus one (0: the default deny).
type Compiled struct {
	Name string
	Mode Mode

	// Landlock is the file system ruleset (rights of LandlockABI). Apply it only in Enforce
	// mode: Landlock has no audit-only mode, so in Audit mode the agent checks traced opens
	// against it (FSAccess) instead.
	Landlock    landlock.Ruleset
	LandlockABI int
	Skipped     []string // grants and denials of paths that do not exist, with the reason

	// Seccomp is the filter program (install with seccomp.Install); Syscalls says what it does
	// to each syscall it names, for the agent's denial records.
	Seccomp  []unix.SockFilter
	Syscalls []SyscallRule

	Network      NetPolicy
	Isolation    NetworkIsolation
	Capabilities []string
	Limits       Resources
	// EventBudget bounds the call's one-by-one events (Observability.EventBudget). It is not
	// part of the hash: it changes what is recorded, not what is enforced.
	EventBudget int64
	// AllowSpecialFiles keeps the FIFOs, sockets and devices a call leaves in its workspace.
	AllowSpecialFiles bool

	Rules []Rule

	// Fatal are the syscalls (by number) whose refused attempt the filter answers with a kill
	// of the process (SECCOMP_RET_KILL_PROCESS).
	Fatal map[uint32]bool

	// Approvals is spec.approvals compiled for the call; nil when it has no rules (or runs in
	// audit mode, which holds nothing).
	Approvals *CompiledApprovals

	placeholders [][2]string // canonical path -> placeholder, for a call-independent hash
}

// Rule is one thing a denial can be attributed to.
type Rule struct {
	ID    uint32
	Layer string // event.LayerSeccomp, LayerCgroupSock, LayerLandlock
	Field string // where it comes from: spec.syscalls.deny[3], or "builtin"
	Text  string
}

func (c *Compiled) addRule(layer, field, text string) uint32 {
	id := uint32(len(c.Rules) + 1)
	c.Rules = append(c.Rules, Rule{ID: id, Layer: layer, Field: field, Text: text})
	return id
}

// RuleByID returns the rule a layer reported, or false for 0 (the default deny) and unknown ids.
func (c *Compiled) RuleByID(id uint32) (Rule, bool) {
	if id == 0 || int(id) > len(c.Rules) {
		return Rule{}, false
	}
	return c.Rules[id-1], true
}

// Compile turns the policy into kernel-ready form for one call. Errors name the field at fault.
func (p *Policy) Compile(env CompileEnv) (*Compiled, error) {
	c := &Compiled{
		Name:              p.Metadata.Name,
		Mode:              p.Spec.Mode,
		Isolation:         p.Spec.Isolation.Network,
		Capabilities:      slices.Clone(p.Spec.Isolation.Capabilities),
		Limits:            p.Spec.Resources,
		EventBudget:       p.Spec.Observability.EventBudget,
		AllowSpecialFiles: p.Spec.Filesystem.AllowSpecialFiles,
	}
	var errs Errors
	errs = append(errs, p.compileSeccomp(c)...)
	errs = append(errs, p.compileNetwork(c)...)
	errs = append(errs, p.compileFilesystem(c, env)...)
	errs = append(errs, p.compileApprovals(c, env)...)
	if len(errs) > 0 {
		return nil, errs
	}
	slices.Sort(c.Capabilities)
	return c, nil
}

// fail makes an Error located at a field of the policy.
func (p *Policy) fail(field, format string, a ...any) *Error {
	e := &Error{File: p.File, Field: field, Msg: fmt.Sprintf(format, a...)}
	if ps, ok := p.pos[field]; ok {
		e.Line, e.Col = ps.line, ps.col
	}
	return e
}

// Hash is "sha256:" and the digest of the canonical encoding of the compiled form. The call's
// own workspace and tmp paths are written as their placeholders, so one policy compiled on one
// host hashes the same for every call.
func (c *Compiled) Hash() string {
	h := sha256.New()
	c.encode(h)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// encode writes the canonical encoding: one line per fact, in a fixed order, every variable
// string quoted, every list already sorted by Compile.
func (c *Compiled) encode(w io.Writer) {
	q := strconv.Quote
	fmt.Fprintf(w, "berm-compiled-policy v1\nname %s\nmode %s\nisolation %s\n", q(c.Name), c.Mode, c.Isolation)
	fmt.Fprintf(w, "caps %s\n", strings.Join(c.Capabilities, ","))
	l := c.Limits
	fmt.Fprintf(w, "limits mem=%d pids=%d millicpus=%d wall=%d output=%d tmp=%d\n",
		l.MemoryBytes, l.Pids, l.MilliCPUs, int64(l.WallTime), l.OutputBytes, l.TmpSizeBytes)
	fmt.Fprintf(w, "quota tmpinodes=%d disk=%d inodes=%d specialfiles=%t\n", l.TmpInodes, l.DiskBytes, l.Inodes, c.AllowSpecialFiles)
	fmt.Fprintf(w, "landlock abi=%d fs=%#x net=%#x scoped=%#x\n", c.LandlockABI, c.Landlock.HandledFS, c.Landlock.HandledNet, c.Landlock.Scoped)
	for _, r := range c.Landlock.Paths {
		fmt.Fprintf(w, "path %s %#x\n", q(c.unplace(r.Path)), r.Access)
	}
	for _, r := range c.Landlock.Ports {
		fmt.Fprintf(w, "port %d %#x\n", r.Port, r.Access)
	}
	for _, in := range c.Seccomp {
		fmt.Fprintf(w, "bpf %04x %02x %02x %08x\n", in.Code, in.Jt, in.Jf, in.K)
	}
	for _, r := range c.Network.Prefixes {
		fmt.Fprintf(w, "prefix %s\n", r.Prefix)
		for _, e := range r.Entries {
			fmt.Fprintf(w, " entry %s\n", e)
		}
	}
	for _, d := range c.Network.Domains {
		if d.AllowPrivate {
			fmt.Fprintf(w, "domain %s proto=%d ports=%v rule=%d allow-private\n", q(d.Pattern), d.Proto, d.Ports, d.RuleID)
		} else {
			fmt.Fprintf(w, "domain %s proto=%d ports=%v rule=%d\n", q(d.Pattern), d.Proto, d.Ports, d.RuleID)
		}
	}
	for _, s := range c.Network.Sockets {
		fmt.Fprintf(w, "socket %d %d\n", s.Family, s.Type)
	}
	for _, r := range c.Rules {
		fmt.Fprintf(w, "rule %d %s %s %s\n", r.ID, r.Layer, q(r.Field), q(c.unplace(r.Text)))
	}
	if a := c.Approvals; a != nil {
		// Only when there are rules: the hashes of policies without approvals stay as they were.
		fmt.Fprintf(w, "approvals timeout=%d\n", int64(a.Timeout))
		for _, r := range a.Rules {
			what := r.Describe()
			if r.Glob != "" {
				what = r.Action + " " + c.unplace(r.Glob)
			}
			fmt.Fprintf(w, "approval %s %s count=%d approvers=%s\n", q(r.Name), q(what), r.Count, strings.Join(r.Approvers, ","))
		}
		for _, in := range a.Filter {
			fmt.Fprintf(w, "notify-bpf %04x %02x %02x %08x\n", in.Code, in.Jt, in.Jf, in.K)
		}
	}
}

func (c *Compiled) unplace(s string) string {
	for _, pl := range c.placeholders {
		if s == pl[0] || strings.HasPrefix(s, pl[0]+"/") {
			return pl[1] + strings.TrimPrefix(s, pl[0])
		}
	}
	return s
}

// Check reads a policy file and reports every problem found without a call to compile for:
// syntax, schema, values, and whatever compiling the seccomp and network parts finds.
func Check(path string) []error {
	p, err := Load(path)
	if err == nil {
		c := &Compiled{}
		var errs Errors
		errs = append(errs, p.compileSeccomp(c)...)
		errs = append(errs, p.compileNetwork(c)...)
		if len(errs) > 0 {
			err = errs
		}
	}
	if err == nil {
		return nil
	}
	var es Errors
	if errors.As(err, &es) {
		out := make([]error, len(es))
		for i, e := range es {
			out[i] = e
		}
		return out
	}
	return []error{err}
}

// CheckMain is `berm policy check FILE...`: every problem on stderr, exit 0 when all files are
// valid, 1 when one is not, 2 on wrong usage.
func CheckMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") }) {
		fmt.Fprintln(stderr, "usage: berm policy check FILE...")
		return 2
	}
	rc := 0
	for _, f := range args {
		errs := Check(f)
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		if len(errs) > 0 {
			rc = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", f)
	}
	return rc
}
