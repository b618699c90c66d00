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

	File string         // where it was read from; "<strict>" for the built-in policy
	pos  map[string]pos // field path -> where its value is, for errors found while compiling
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
	Network      NetworkIsolation
	Capabilities []string // kept in the bounding, permitted and effective sets; CAP_* names
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
	// AllowSpecialFiles lets FIFOs, sockets and device nodes the call leaves in its workspace
	// stay there; by default they are removed after the call (a FIFO left under a result
	// file's name would block a host reader forever).
	AllowSpecialFiles bool
}

type Network struct {
	Egress []EgressRule
	// AllowNetlink lets the tool open netlink sockets (and packet sockets, which still need
	// CAP_NET_RAW). By default socket() refuses every family but unix, inet and inet6.
	AllowNetlink bool
}

type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

type EgressRule struct {
	CIDR     netip.Prefix
	Ports    []PortRange
	Protocol Protocol
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
	// Fatal syscalls end the whole call when an attempt is refused: the agent sees the
	// refusal and kills the call's cgroup (end reason policy_kill). Audit mode only records.
	Fatal []string
}

type SyscallAction string

const (
	ActionErrno SyscallAction = "errno" // EPERM
	ActionKill  SyscallAction = "kill"
	ActionLog   SyscallAction = "log"
)

type pos struct{ line, col int }
