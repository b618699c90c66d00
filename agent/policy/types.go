// Package policy reads ToolPolicy files (the envelope a tool call runs in) and compiles them
// into what the enforcement layers load: Landlock rules, a seccomp program, network map entries
// and resource limits. Reading and compiling are pure Go; applying is the launcher's job.
package policy

import (
	"net/netip"
	"time"
)

const (
	APIVersion = "berm.dev/v1alpha1"
	Kind       = "ToolPolicy"
)

// Placeholders a path may start with; the launcher supplies their values (CompileEnv).
const (
	Workspace = "${WORKSPACE}"
	Tmp       = "${TMP}"
)

// Policy is a parsed ToolPolicy. Fields a file leaves out take the built-in strict policy's
// values, so a policy only states where it differs; an explicit empty list means none.
type Policy struct {
	APIVersion string
	Kind       string
	Metadata   Metadata
	Spec       Spec

	File string // where it was read from; "<strict>" for the built-in policy
	// Parents are the policy files it extends, nearest first (none: it extends strict).
	Parents []Parent
	pos     map[string]pos // field path -> where its value is, for errors found while compiling
}

type Metadata struct {
	Name        string
	Description string
}

type Mode string

const (
	Enforce Mode = "enforce"
	Audit   Mode = "audit" // record every would-be denial with its rule, block nothing
)

type Spec struct {
	Mode       Mode
	Isolation  Isolation
	Resources  Resources
	Filesystem Filesystem
	Network    Network
	Syscalls   Syscalls
	// Observability bounds the call's trail.
	Observability Observability
	// Credentials are the brokered secrets the call receives (credentials.go).
	Credentials []Credential
	// Output is what berm redacts from the tool's output.
	Output Output
	// Approvals holds irreversible actions until a person decides (approvals.go).
	Approvals Approvals
}

// Observability bounds what one call can put in the trail.
type Observability struct {
	// EventBudget is how many events a call records one by one; past it, its high-volume
	// events (opens, syscalls, connects, forks, exits, denials) are counted per kind and
	// object (aggregate events). Execs, alerts, limits and drops are always recorded.
	EventBudget int64
}

// NetworkIsolation is how the call reaches the network at all.
type NetworkIsolation string

const (
	// NetworkNone: a fresh network namespace with loopback only; egress rules are not allowed.
	NetworkNone NetworkIsolation = "none"
	// NetworkHostFiltered: the host's network, filtered by the egress rules (default deny).
	NetworkHostFiltered NetworkIsolation = "host-filtered"
)

type Isolation struct {
	Network NetworkIsolation
	// Capabilities must be empty: the tool runs with no capability at all, and a list is
	// refused (by `berm policy check` too) rather than accepted and silently not applied.
	// The field is kept so a file that states "capabilities: []" stays valid.
	Capabilities []string
}

// Resources are per-call caps.
type Resources struct {
	MemoryBytes  int64
	Pids         int64
	MilliCPUs    int64 // 1000 = one CPU
	WallTime     time.Duration
	OutputBytes  int64 // captured stdout+stderr
	TmpSizeBytes int64 // size of the private /tmp
	TmpInodes    int64 // files and directories the private /tmp holds at most
	// DiskBytes and Inodes are what the call may add to its workspace's file system: blocks
	// allocated (fallocate counts, sparse holes do not) and inodes created.
	DiskBytes int64
	Inodes    int64
}

// Filesystem lists path trees; each entry is absolute or starts with ${WORKSPACE} or ${TMP}.
// Deny carves trees out of broader grants (a grant strictly inside a denied tree stays).
type Filesystem struct {
	Read  []string
	Write []string
	Exec  []string
	Deny  []string
	// AllowSpecialFiles lets the call make FIFOs and unix sockets bound to a path in its
	// writable trees (Landlock's make_fifo and make_sock rights). By default both are refused
	// when they are made, each refusal a Landlock denial: a FIFO left under a result file's
	// name would block a host reader forever. Device nodes are refused either way.
	AllowSpecialFiles bool
}

type Network struct {
	Egress []EgressRule
	// AllowNetlink lets the tool open netlink sockets. Otherwise socket() refuses every family
	// but unix, inet and inet6 with EAFNOSUPPORT, in the seccomp filter (an exact allowlist).
	AllowNetlink bool
}

type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

type EgressRule struct {
	CIDR netip.Prefix
	// Domain, instead of CIDR: a name (api.github.com) or a leading wildcard (*.pypi.org,
	// which covers its subdomains, not pypi.org itself). Its ports are reachable only at the
	// addresses berm's resolver answered for it, in the call that asked (domain.go).
	Domain   string
	Ports    []PortRange
	Protocol Protocol
	// AllowPrivate lets a domain rule's answers in private, loopback, link-local, CGNAT,
	// unique-local or unspecified ranges be pinned (PrivateRange). Without it they are
	// withheld: a public name answered with an internal address (DNS rebinding) opens
	// nothing inside.
	AllowPrivate bool
}

type PortRange struct{ Lo, Hi uint16 }

// Syscalls is either a deny list (everything else allowed) or an allow list with a default
// action for everything else.
type Syscalls struct {
	Deny          []string
	Allow         []string
	DefaultAction SyscallAction // allow-list mode only
	// DenyNewNamespaces refuses clone and unshare with CLONE_NEW* flags and setns, whatever
	// the lists say, and makes clone3 (whose flags a filter cannot read) fail with ENOSYS so
	// the C library falls back to clone.
	DenyNewNamespaces bool
	// DenyTerminalInjection refuses ioctl TIOCSTI (push characters into a terminal's input,
	// as if typed by its user) and TIOCLINUX (which can do the same through the console's
	// selection) on any descriptor.
	DenyTerminalInjection bool
	// DenyFileWatch refuses inotify_init, inotify_init1 and fanotify_init. The system trees
	// are shared with the host and every other call: a watch on /usr/bin or /etc would show
	// what they open. A filter cannot confine a watch to the workspace (inotify_add_watch
	// takes a path), so the instance itself is refused.
	DenyFileWatch bool
	// DenyExecutableMemfd refuses memfd_create with MFD_EXEC and execveat with AT_EMPTY_PATH
	// (fexecve): code written to memory is not run from a descriptor. The launcher also sets
	// vm.memfd_noexec in the call's pid namespace for memfds created without the flag.
	DenyExecutableMemfd bool
	// Fatal syscalls end the process that attempts them: the filter itself answers with
	// SECCOMP_RET_KILL_PROCESS, so no event has to reach the agent. When that process is the
	// tool's the call ends as policy_kill, naming the syscall. Only a refused attempt can be
	// fatal; audit mode logs it instead.
	Fatal []string
}

type SyscallAction string

const (
	ActionErrno SyscallAction = "errno" // EPERM
	ActionKill  SyscallAction = "kill"
	ActionLog   SyscallAction = "log"
)

type pos struct{ line, col int }
