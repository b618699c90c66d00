// Package event defines berm's audit schema: the events of a tool call and the call record.
// The journal stores them, the rules engine evaluates them, the collector ships them and the
// timeline prints them; all of them use these types.
package event

import (
	"fmt"
	"time"
)

// Kind names what an event is about. The values are stable: they are stored and queried.
type Kind string

const (
	KindExec    Kind = "exec"
	KindFork    Kind = "fork"
	KindExit    Kind = "exit"
	KindOpen    Kind = "open"
	KindConnect Kind = "connect"
	KindSyscall Kind = "syscall"
	KindDenial  Kind = "denial" // a policy layer refused (or in audit mode would have refused) something
	KindAlert   Kind = "alert"  // a detection rule fired
	KindDrop    Kind = "drop"   // events of the call were lost; Drop says how many and where
	KindLimit   Kind = "limit"  // the call hit a resource cap; Limit says which
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{KindExec, KindFork, KindExit, KindOpen, KindConnect, KindSyscall, KindDenial, KindAlert, KindDrop, KindLimit}

// Event is one thing a tool call did, as seen by the kernel (or by the rules engine).
// Exactly one of the kind-specific parts is set, the one named by Kind.
type Event struct {
	CallID string    `json:"call_id"`
	Seq    uint64    `json:"seq"` // order within the call, from 1; (CallID, Seq) identifies the event
	Time   time.Time `json:"time"`
	Kind   Kind      `json:"kind"`
	Tool   string    `json:"tool,omitempty"`
	Tenant string    `json:"tenant,omitempty"`

	PID  uint32 `json:"pid,omitempty"`  // host tgid
	TID  uint32 `json:"tid,omitempty"`  // host tid
	PPID uint32 `json:"ppid,omitempty"` // host tgid of the real parent
	UID  uint32 `json:"uid"`
	Comm string `json:"comm,omitempty"`
	// Exe is the file the process last executed, ParentExe its parent's: the agent keeps each
	// call's process tree so that every event says which program did it.
	Exe       string `json:"exe,omitempty"`
	ParentExe string `json:"parent_exe,omitempty"`

	Exec    *Exec    `json:"exec,omitempty"`
	Fork    *Fork    `json:"fork,omitempty"`
	Exit    *Exit    `json:"exit,omitempty"`
	Open    *Open    `json:"open,omitempty"`
	Connect *Connect `json:"connect,omitempty"`
	Syscall *Syscall `json:"syscall,omitempty"`
	Denial  *Denial  `json:"denial,omitempty"`
	Alert   *Alert   `json:"alert,omitempty"`
	Drop    *Drop    `json:"drop,omitempty"`
	Limit   *Limit   `json:"limit,omitempty"`
}

// ID is the event's stable identity, the same wherever the event is stored.
func (e *Event) ID() string { return fmt.Sprintf("%s/%d", e.CallID, e.Seq) }

type Exec struct {
	Filename  string   `json:"filename"` // as passed to execve
	Argv      []string `json:"argv"`
	Truncated bool     `json:"truncated,omitempty"` // argv was longer than the kernel buffer
	Mode      uint32   `json:"mode"`                // file mode of the executable (S_ISUID = 0o4000)
	Setuid    bool     `json:"setuid,omitempty"`    // the file has the setuid or setgid bit
	Deleted   bool     `json:"deleted,omitempty"`   // the file had no links (deleted, or a memfd)
	ExeName   string   `json:"exe_name,omitempty"`  // dentry name; "memfd:..." for a memfd
	EUID      uint32   `json:"euid"`                // effective uid after the exec

	ArgsLen uint32 `json:"args_len,omitempty"` // argv's whole length in bytes (NUL-separated), recorded or not
}

type Fork struct {
	ChildPID uint32 `json:"child_pid"`
}

type Exit struct {
	Code   int `json:"code"`             // exit status when Signal is 0
	Signal int `json:"signal,omitempty"` // terminating signal
}

type Open struct {
	Path   string `json:"path"` // as the process gave it
	Dirfd  int32  `json:"dirfd"`
	Flags  uint32 `json:"flags"`
	Mode   uint32 `json:"mode,omitempty"`
	Result int64  `json:"result"` // fd, or -errno
	Errno  string `json:"errno,omitempty"`

	// Path is what the kernel acted on: for an open that yielded an fd, the kernel's path of
	// the file behind it (PathSource "kernel"); otherwise the argument as read at syscall
	// entry (PathSource "user"), before the call could block and its memory be rewritten.
	PathTruncated bool   `json:"path_truncated,omitempty"` // Path is cut; PathLen is its whole length
	PathLen       uint32 `json:"path_len,omitempty"`       // whole length of the path; 0 when not known
	PathSource    string `json:"path_source,omitempty"`    // "kernel" or "user"
	// ResolvedPath is a relative user Path joined to the kernel's path of the directory it
	// was resolved against (dirfd's, or the cwd).
	ResolvedPath string `json:"resolved_path,omitempty"`
}

type Connect struct {
	Family string `json:"family"` // inet, inet6, unix, or the number
	Addr   string `json:"addr"`   // IP address or unix socket path
	Port   uint16 `json:"port,omitempty"`
	Result int64  `json:"result"`
	Errno  string `json:"errno,omitempty"`

	// AddrSource: "user" when the address was read from the caller's memory at syscall entry,
	// before the call could block; empty when it could not be captured.
	AddrSource string `json:"addr_source,omitempty"`
}

type Syscall struct {
	Nr     uint32    `json:"nr"`
	Name   string    `json:"name"`
	Args   [6]uint64 `json:"args"`
	Path   string    `json:"path,omitempty"`  // the path argument, for syscalls that take one
	Path2  string    `json:"path2,omitempty"` // second path: rename/link destination, mount source
	Result int64     `json:"result"`
	Errno  string    `json:"errno,omitempty"`

	// PathSource is "kernel" for the file behind an fd (ftruncate, fallocate, fchmod, ...),
	// "user" for a path argument read at syscall entry.
	PathSource     string `json:"path_source,omitempty"`
	PathTruncated  bool   `json:"path_truncated,omitempty"`
	PathLen        uint32 `json:"path_len,omitempty"` // whole length of Path; 0 when not known
	Path2Truncated bool   `json:"path2_truncated,omitempty"`
	Path2Len       uint32 `json:"path2_len,omitempty"`
}

// Denial is a refusal by an enforcement layer. Audit is true when the policy is in audit mode
// and the action was allowed but would have been refused.
type Denial struct {
	Layer   string `json:"layer"`   // landlock, seccomp, bpf-cgroup, bpf-lsm, mount, ...
	Surface string `json:"surface"` // isolation, resource, policy, credential, approval, observability
	Rule    string `json:"rule"`    // what fired
	Object  string `json:"object"`  // path, address or syscall
	Audit   bool   `json:"audit,omitempty"`
}

// Alert is a detection rule that matched an event of the call.
type Alert struct {
	RuleID    string   `json:"rule_id"`
	Title     string   `json:"title"`
	Severity  string   `json:"severity"`
	Surface   string   `json:"surface"`
	Technique []string `json:"technique,omitempty"` // MITRE ATT&CK ids
	Output    string   `json:"output"`
	EventSeq  uint64   `json:"event_seq"` // the event that triggered it
}

// Drop reports events of the call that were lost, and where.
type Drop struct {
	Kernel uint64 `json:"kernel"` // ring buffer was full
	User   uint64 `json:"user"`   // the agent's queue was full
}

// Limit is a resource cap the call hit.
type Limit struct {
	Resource string `json:"resource"` // memory, pids, wall_time, output, tmp
	Limit    int64  `json:"limit"`
	Detail   string `json:"detail,omitempty"`
}
