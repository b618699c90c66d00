package policy

import (
	"bytes"
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
	// Reads, when set, records every fact of the file system the compile reads (FSReads).
	Reads *FSReads
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
	// One buffer, one digest: the encoding is a few hundred lines, and written to the digest
	// a line at a time through fmt it cost bermd 0.1-0.2 ms of every launch.
	sum := sha256.Sum256(c.appendEncoding(make([]byte, 0, 16<<10)))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// appendEncoding appends the canonical encoding to b: one line per fact, in a fixed order,
// every variable string quoted, every list already sorted by Compile. The lines of every
// call's policy (paths, the filter, rules) are appends; the rest goes through fmt (a test
// holds the whole equal to its plain fmt form).
func (c *Compiled) appendEncoding(b []byte) []byte {
	buf := bytes.NewBuffer(b)
	c.encodeHead(buf)
	b = buf.Bytes()
	for _, r := range c.Landlock.Paths {
		b = append(b, "path "...)
		b = appendQuote(b, c.unplace(r.Path))
		b = append(b, " 0x"...)
		b = strconv.AppendUint(b, r.Access, 16)
		b = append(b, '\n')
	}
	for _, r := range c.Landlock.Ports {
		b = append(b, "port "...)
		b = strconv.AppendUint(b, uint64(r.Port), 10)
		b = append(b, " 0x"...)
		b = strconv.AppendUint(b, r.Access, 16)
		b = append(b, '\n')
	}
	b = appendBPF(b, "bpf ", c.Seccomp)
	buf = bytes.NewBuffer(b)
	c.encodeNetworkRules(buf)
	b = buf.Bytes()
	for _, s := range c.Network.Sockets {
		b = append(b, "socket "...)
		b = strconv.AppendInt(b, int64(s.Family), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(s.Type), 10)
		b = append(b, '\n')
	}
	for _, r := range c.Rules {
		b = append(b, "rule "...)
		b = strconv.AppendUint(b, uint64(r.ID), 10)
		b = append(b, ' ')
		b = append(b, r.Layer...)
		b = append(b, ' ')
		b = appendQuote(b, r.Field)
		b = append(b, ' ')
		b = appendQuote(b, c.unplace(r.Text))
		b = append(b, '\n')
	}
	if a := c.Approvals; a != nil {
		buf = bytes.NewBuffer(b)
		c.encodeApprovals(buf)
		b = appendBPF(buf.Bytes(), "notify-bpf ", a.Filter)
	}
	return b
}

// appendBPF appends a filter program as "%04x %02x %02x %08x" lines after prefix.
func appendBPF(b []byte, prefix string, prog []unix.SockFilter) []byte {
	for _, in := range prog {
		b = append(b, prefix...)
		b = appendHex(b, uint64(in.Code), 4)
		b = append(b, ' ')
		b = appendHex(b, uint64(in.Jt), 2)
		b = append(b, ' ')
		b = appendHex(b, uint64(in.Jf), 2)
		b = append(b, ' ')
		b = appendHex(b, uint64(in.K), 8)
		b = append(b, '\n')
	}
	return b
}

// appendQuote is strconv.AppendQuote, without its per-rune work for the plain ASCII strings
// (paths, rule texts) that make up most of the encoding: those it quotes as they are.
func appendQuote(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendHex is %0<width>x.
func appendHex(b []byte, v uint64, width int) []byte {
	var d [16]byte
	h := strconv.AppendUint(d[:0], v, 16)
	for i := len(h); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, h...)
}

func (c *Compiled) encodeHead(w io.Writer) {
	q := strconv.Quote
	fmt.Fprintf(w, "berm-compiled-policy v1\nname %s\nmode %s\nisolation %s\n", q(c.Name), c.Mode, c.Isolation)
	fmt.Fprintf(w, "caps %s\n", strings.Join(c.Capabilities, ","))
	l := c.Limits
	fmt.Fprintf(w, "limits mem=%d pids=%d millicpus=%d wall=%d output=%d tmp=%d\n",
		l.MemoryBytes, l.Pids, l.MilliCPUs, int64(l.WallTime), l.OutputBytes, l.TmpSizeBytes)
	fmt.Fprintf(w, "quota tmpinodes=%d disk=%d inodes=%d specialfiles=%t\n", l.TmpInodes, l.DiskBytes, l.Inodes, c.AllowSpecialFiles)
	fmt.Fprintf(w, "landlock abi=%d fs=%#x net=%#x scoped=%#x\n", c.LandlockABI, c.Landlock.HandledFS, c.Landlock.HandledNet, c.Landlock.Scoped)
}

// encodeNetworkRules writes the prefixes and domains (the sockets' lines follow them).
func (c *Compiled) encodeNetworkRules(w io.Writer) {
	q := strconv.Quote
	for _, r := range c.Network.Prefixes {
		fmt.Fprintf(w, "prefix %s\n", r.Prefix)
		for _, e := range r.Entries {
			fmt.Fprintf(w, " entry %s\n", e)
		}
	}
	for _, d := range c.Network.Domains {
		if d.Inject != "" {
			fmt.Fprintf(w, "domain %s proto=%d ports=%v rule=%d allow-private=%t inject=%s\n", q(d.Pattern), d.Proto, d.Ports, d.RuleID, d.AllowPrivate, q(d.Inject))
			continue
		}
		if d.AllowPrivate {
			fmt.Fprintf(w, "domain %s proto=%d ports=%v rule=%d allow-private\n", q(d.Pattern), d.Proto, d.Ports, d.RuleID)
		} else {
			fmt.Fprintf(w, "domain %s proto=%d ports=%v rule=%d\n", q(d.Pattern), d.Proto, d.Ports, d.RuleID)
		}
	}
}

// encodeApprovals writes the approvals' header and rules (the filter follows them). Only when
// there are rules: the hashes of policies without approvals stay as they were.
func (c *Compiled) encodeApprovals(w io.Writer) {
	q := strconv.Quote
	a := c.Approvals
	fmt.Fprintf(w, "approvals timeout=%d\n", int64(a.Timeout))
	for _, r := range a.Rules {
		what := r.Describe()
		if r.Glob != "" {
			what = r.Action + " " + c.unplace(r.Glob)
		}
		fmt.Fprintf(w, "approval %s %s count=%d approvers=%s\n", q(r.Name), q(what), r.Count, strings.Join(r.Approvers, ","))
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
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, "usage: berm policy check FILE...")
		return 0
	}
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
		// What strict protects and this file drops: warnings, not errors (a policy may mean it).
		var dropped []string
		if p, err := Load(f); err == nil {
			dropped = p.Dropped()
		}
		for _, d := range dropped {
			fmt.Fprintf(stderr, "%s: warning: %s\n", f, d)
		}
		if len(dropped) > 0 {
			fmt.Fprintf(stdout, "%s: ok, with %d protections of strict dropped (warnings above)\n", f, len(dropped))
			continue
		}
		fmt.Fprintf(stdout, "%s: ok\n", f)
	}
	return rc
}
