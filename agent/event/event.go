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
	KindReload  Kind = "reload" // the policy was reloaded while the call ran (or a reload was refused)
	// KindApproval is an action held for a person's decision (spec.approvals): its request,
	// and its decision in a second event with the same Approval.ID.
	KindApproval Kind = "approval"
	// KindAggregate stands for events past the call's event budget: counted per kind and
	// object instead of recorded one by one (they were still judged and seen by the rules).
	KindAggregate Kind = "aggregate"
	KindDNS       Kind = "dns" // a name lookup berm's resolver answered (or refused) for the call
	// KindMCP is a Model Context Protocol request berm's MCP proxy relayed to the server the
	// call runs (berm mcp proxy): its start, and its end in a second event with the same
	// MCP.RequestID.
	KindMCP Kind = "mcp"
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{KindExec, KindFork, KindExit, KindOpen, KindConnect, KindSyscall, KindDenial, KindAlert, KindDrop, KindLimit, KindReload, KindApproval, KindAggregate, KindCredential, KindDNS, KindMCP}

// Event is one thing a tool call did, as seen by the kernel (or by the rules engine).
// Exactly one of the kind-specific parts is set, the one named by Kind.
//
// These types are the one definition of the event schema: collector/internal/schemagen reads
// them (`go generate ./collector`) and writes the collector's scanner, its ClickHouse rows,
// the DDL migrations for new columns and FIELDS.md. The ch tag maps a member to a ClickHouse
// column: on Event, every member is a column of the events table named after its JSON name
// unless tagged ch:"-"; on a part, only tagged members are, into the table's shared columns
// (path, result, ...), filled from the first part that is set. Options after the name: lc
// (LowCardinality in the modern dialect), ip (an address: the addr column when it parses as
// one, else path), table (a part that has a table of its own, alerts). A part's members are
// written, and scanned, in declaration order: the first one must not be omitempty.
type Event struct {
	CallID  string    `json:"call_id"`                   // the call the event belongs to, as its caller named it
	CallKey string    `json:"call_key,omitempty"`        // the call's unique identity (CallStart.CallKey)
	Seq     uint64    `json:"seq"`                       // order within the call, from 1; (CallID, Seq) identifies the event
	Time    time.Time `json:"time"`                      // when the kernel (or the agent) saw it, to the nanosecond
	Kind    Kind      `json:"kind" ch:",lc"`             // what the event is about: names its one part
	Tool    string    `json:"tool,omitempty" ch:",lc"`   // the tool the call ran
	Tenant  string    `json:"tenant,omitempty" ch:",lc"` // the tenant the call ran for

	PID  uint32 `json:"pid,omitempty"`           // host tgid
	TID  uint32 `json:"tid,omitempty"`           // host tid
	PPID uint32 `json:"ppid,omitempty"`          // host tgid of the real parent
	UID  uint32 `json:"uid"`                     // host real uid of the process
	Comm string `json:"comm,omitempty" ch:",lc"` // the kernel's task name (comm, 15 bytes)
	// Exe is the file the process last executed: the agent keeps each call's process tree so
	// that every event says which program did it.
	Exe       string `json:"exe,omitempty" ch:",lc"`
	ParentExe string `json:"parent_exe,omitempty" ch:",lc"` // the file the parent process last executed
	// Phase is "setup" (PhaseSetup) for events of berm's own sandbox set-up (the sandbox init);
	// empty for the tool's own. Set-up events are kept out of the record's counts and the
	// default timeline.
	Phase string `json:"phase,omitempty" ch:",lc"`

	Exec    *Exec    `json:"exec,omitempty"`
	Fork    *Fork    `json:"fork,omitempty"`
	Exit    *Exit    `json:"exit,omitempty"`
	Open    *Open    `json:"open,omitempty"`
	Connect *Connect `json:"connect,omitempty"`
	Syscall *Syscall `json:"syscall,omitempty"`
	Denial  *Denial  `json:"denial,omitempty"`
	Alert   *Alert   `json:"alert,omitempty" ch:",table"`
	Drop    *Drop    `json:"drop,omitempty"`
	Limit   *Limit   `json:"limit,omitempty"`
	Reload  *Reload  `json:"reload,omitempty"`

	Approval *Approval `json:"approval,omitempty"`

	Aggregate *Aggregate `json:"aggregate,omitempty"`

	Credential *Credential `json:"credential,omitempty"`
	DNS        *DNS        `json:"dns,omitempty"`
	MCP        *MCP        `json:"mcp,omitempty"`
}

// ID is the event's stable identity, the same wherever the event is stored.
func (e *Event) ID() string {
	if e.CallKey != "" {
		return fmt.Sprintf("%s/%d", e.CallKey, e.Seq)
	}
	return fmt.Sprintf("%s/%d", e.CallID, e.Seq)
}

// Key is the call's identity: its CallKey, or for records made before calls had keys, its
// tenant and id.
func (s *CallStart) Key() string {
	if s.CallKey != "" {
		return s.CallKey
	}
	return s.Tenant + "/" + s.CallID
}

// Key is the identity of the call the event belongs to (CallStart.Key).
func (e *Event) Key() string {
	if e.CallKey != "" {
		return e.CallKey
	}
	return e.Tenant + "/" + e.CallID
}

// Exec is a successful execve or execveat.
type Exec struct {
	Filename  string   `json:"filename" ch:"path"`  // as passed to execve
	Argv      []string `json:"argv"`                // the arguments, as far as the kernel buffer holds them
	Truncated bool     `json:"truncated,omitempty"` // argv was longer than the kernel buffer
	Mode      uint32   `json:"mode"`                // file mode of the executable (S_ISUID = 0o4000)
	Setuid    bool     `json:"setuid,omitempty"`    // the file has the setuid or setgid bit
	Deleted   bool     `json:"deleted,omitempty"`   // the file had no links (deleted, or a memfd)
	ExeName   string   `json:"exe_name,omitempty"`  // dentry name; "memfd:..." for a memfd
	ExePath   string   `json:"exe_path,omitempty"`  // the kernel's path of the executed file (after symlinks, for an fd too); empty if too long
	// EUID and EGID are the effective ids after the exec as the kernel sees them: in the
	// initial user namespace (the host's), whatever the tool's own user namespace calls them
	// (a tool running as 1000 in its sandbox is its call's own host uid here).
	EUID    uint32 `json:"euid"`
	EGID    uint32 `json:"egid"`               // effective gid after the exec, in the initial user namespace
	ArgsLen uint32 `json:"args_len,omitempty"` // argv's whole length in bytes (NUL-separated), recorded or not
	// The environment is scanned for other calls' live secrets and never recorded, only its size.
	EnvLen       uint32 `json:"env_len,omitempty"`       // the environment's whole length in bytes (NUL-separated NAME=value)
	EnvTruncated bool   `json:"env_truncated,omitempty"` // longer than the kernel's 8 KiB buffer: its end was not scanned for secrets
}

// Fork is a new process of the call.
type Fork struct {
	ChildPID uint32 `json:"child_pid"` // host tgid of the new process
}

// Exit is a process of the call ending.
type Exit struct {
	Code   int `json:"code" ch:"result"` // exit status when Signal is 0
	Signal int `json:"signal,omitempty"` // terminating signal
}

// Open is an open, openat or openat2.
type Open struct {
	// Path is what the kernel acted on: for an open that yielded an fd, the kernel's path of
	// the file behind it (PathSource "kernel"); otherwise the argument as read at syscall
	// entry (PathSource "user"), before the call could block and its memory be rewritten.
	Path   string `json:"path" ch:"path"`
	Dirfd  int32  `json:"dirfd"`                         // the directory fd a relative Path is resolved against (-100: the cwd)
	Flags  uint32 `json:"flags"`                         // open flags (O_RDONLY, O_CREAT, ...)
	Mode   uint32 `json:"mode,omitempty"`                // permission bits of a created file
	Result int64  `json:"result" ch:"result"`            // fd, or -errno
	Errno  string `json:"errno,omitempty" ch:"errno,lc"` // the error's name when Result is negative
	// PathTruncated is set when Path was longer than the kernel's buffer.
	PathTruncated bool   `json:"path_truncated,omitempty"`
	PathLen       uint32 `json:"path_len,omitempty"` // the full length of Path in bytes when PathTruncated
	// PathSource says where Path comes from: "kernel" (resolved from the opened file by the
	// kernel) or "user" (read from the caller's memory, which the caller can rewrite).
	PathSource string `json:"path_source,omitempty"`
	// ResolvedPath is a relative user Path joined to the kernel's path of the directory it
	// was resolved against (dirfd's, or the cwd).
	ResolvedPath string `json:"resolved_path,omitempty"`
}

// Connect is a connect on a socket.
type Connect struct {
	Family string `json:"family"`                        // inet, inet6, unix, or the number
	Addr   string `json:"addr" ch:"addr,ip"`             // IP address or unix socket path
	Port   uint16 `json:"port,omitempty" ch:"port"`      // the port, for inet and inet6
	Result int64  `json:"result" ch:"result"`            // 0, or -errno
	Errno  string `json:"errno,omitempty" ch:"errno,lc"` // the error's name when Result is negative
	// AddrSource is "kernel" when the address is the kernel's own copy of the sockaddr, as
	// the cgroup connect hook saw it (IPv4 and IPv6 with the network layer loaded); "user" when
	// it was read from the caller's memory at syscall entry, before the call could block and
	// its memory be rewritten (unix sockets, a socket already connecting, no network layer);
	// empty when it could not be captured.
	AddrSource string `json:"addr_source,omitempty"`
	// Unresolved: the call's policy names domains, and berm's resolver never answered this
	// address for the call (a connect by address, around the names the policy allows).
	Unresolved bool `json:"unresolved,omitempty"`
}

// Syscall is a traced syscall other than the ones with a part of their own.
type Syscall struct {
	Nr     uint32    `json:"nr"`                            // the x86-64 syscall number
	Name   string    `json:"name" ch:"syscall,lc"`          // the syscall's name
	Args   [6]uint64 `json:"args"`                          // the raw arguments
	Path   string    `json:"path,omitempty" ch:"path"`      // the path argument, for syscalls that take one
	Path2  string    `json:"path2,omitempty"`               // second path: rename/link destination, mount source
	Result int64     `json:"result" ch:"result"`            // the return value, or -errno
	Errno  string    `json:"errno,omitempty" ch:"errno,lc"` // the error's name when Result is negative
	// PathSource is "kernel" for the file behind an fd (ftruncate, fallocate, fchmod, ...),
	// "user" for a path argument read at syscall entry.
	PathSource     string `json:"path_source,omitempty"`
	PathTruncated  bool   `json:"path_truncated,omitempty"`  // Path is cut; PathLen is its whole length
	PathLen        uint32 `json:"path_len,omitempty"`        // whole length of Path; 0 when not known
	Path2Truncated bool   `json:"path2_truncated,omitempty"` // Path2 is cut; Path2Len is its whole length
	Path2Len       uint32 `json:"path2_len,omitempty"`       // whole length of Path2; 0 when not known
	// PathChanged: Path, read from the caller's memory at the syscall's entry, was not the
	// same when read again at its exit (another thread rewrote it while the kernel used it):
	// Path may not name what the kernel acted on.
	PathChanged bool `json:"path_changed,omitempty" ch:"path_changed"`
	// Path2Changed: Path2 was not the same at the syscall's exit as at its entry.
	Path2Changed bool `json:"path2_changed,omitempty"`

	// Where BPF LSM is active, its hooks see the object while the syscall runs (unlink, rmdir,
	// rename, mkdir, mknod, truncate, a failed exec): Path is then the kernel's own path of it
	// (PathSource "kernel"), Dev and Ino name it, and ToolPath is the argument as read from the
	// tool's memory at the syscall's entry. Elsewhere Path is that argument, and its reread at
	// the exit (PathChanged) is all the evidence of a rewrite there is.
	ToolPath string `json:"tool_path,omitempty"`
	Dev      string `json:"dev,omitempty"` // major:minor of the kernel's object
	Ino      uint64 `json:"ino,omitempty"` // its inode; 0 for an entry about to be made
	// PathForged: ToolPath names another entry than the one the kernel acted on (its last
	// component is not the name of the kernel's dentry; compared where the syscall acts on the
	// entry itself and does not follow a final symlink: unlink, rmdir, rename, mkdir, mknod).
	// The tool's memory said one thing while the kernel did another: a forged trail.
	PathForged bool `json:"path_forged,omitempty"`
	// Path2Source is PathSource for Path2, a rename's target: "kernel" where BPF LSM saw it.
	Path2Source string `json:"path2_source,omitempty"`
	// ToolPath2 is Path2 as read from the tool's memory, where Path2 is the kernel's.
	ToolPath2 string `json:"tool_path2,omitempty"`
	Dev2      string `json:"dev2,omitempty"` // major:minor of the kernel's object of Path2
	Ino2      uint64 `json:"ino2,omitempty"` // its inode; 0 for a rename's free target
	// Path2Forged: ToolPath2 names another entry than the one the kernel acted on.
	Path2Forged bool `json:"path2_forged,omitempty"`
}

// Denial is a refusal by an enforcement layer. Audit is true when the policy is in audit mode
// and the action was allowed but would have been refused.
type Denial struct {
	Layer   string `json:"layer"`             // Layer* names: landlock, seccomp, bpf-cgroup-sock, bpf-lsm, mount, ...
	Surface string `json:"surface"`           // isolation, resource, policy, credential, approval, observability
	Rule    string `json:"rule" ch:"rule,lc"` // what fired
	Object  string `json:"object" ch:"path"`  // path, address or syscall
	Audit   bool   `json:"audit,omitempty"`   // audit mode: allowed, but would have been refused
}

// Alert is a detection rule that matched an event of the call.
type Alert struct {
	RuleID    string   `json:"rule_id" ch:"rule,lc"` // the rule's id
	Title     string   `json:"title"`                // the rule's title
	Severity  string   `json:"severity"`             // info, low, medium, high, critical
	Surface   string   `json:"surface"`              // the surface the rule guards
	Technique []string `json:"technique,omitempty"`  // MITRE ATT&CK ids
	Output    string   `json:"output"`               // the rule's output, filled from the event
	EventSeq  uint64   `json:"event_seq"`            // the event that triggered it
}

// Drop reports events of the call that were lost, and where.
type Drop struct {
	Kernel uint64 `json:"kernel"` // lost in the kernel: the ring buffer was full, or past a share
	User   uint64 `json:"user"`   // the agent's queue was full
	// KernelNoise are, of Kernel, noise records (failed opens of files not there, reads, forks,
	// exits, path-less syscalls that worked) the kernel dropped to keep the ring's last quarter
	// for vital ones (an exec, a connect, a denial, a destructive operation that worked, a
	// refusal); Kernel - KernelNoise vital records were lost.
	KernelNoise uint64 `json:"kernel_noise,omitempty"`
	// UserNoise are, of User, noise records the agent left out of the call's queue past its
	// noise share; User - UserNoise vital records were lost.
	UserNoise uint64 `json:"user_noise,omitempty"`
	// DNS are queries the call sent its resolver that the kernel dropped before the resolver
	// read them (the call's resolver socket's buffer was full): never answered, never recorded.
	DNS uint64 `json:"dns,omitempty"`
}

// Limit is a resource cap the call hit.
type Limit struct {
	Resource string `json:"resource"`         // Resource* names: memory, pids, wall_time, output, tmp, tmp_inodes, disk, inodes
	Limit    int64  `json:"limit"`            // the cap (bytes, processes, nanoseconds)
	Detail   string `json:"detail,omitempty"` // what happened at the cap
}

// Reload is a policy hot reload during the call: applied (Detail says what changed) or
// refused (Detail says why; the previous policy stays in force).
type Reload struct {
	Surface    string `json:"surface"`          // the part of the policy reloaded: network, ...
	Applied    bool   `json:"applied"`          // false when the reload was refused
	Detail     string `json:"detail,omitempty"` // what changed, or why it was refused
	Generation uint64 `json:"generation"`       // reloads applied so far in the call, this one included
}

// Approval is an action of the call held in the kernel for a person's decision: the request
// (Outcome "requested") and then its end, under the same ID: approved, denied, timeout (no
// answer: a deny), ended (the call ended while it waited), repeat (the call asked again for an
// action just denied: denied at once), or covered (allowed by an earlier approval whose
// count covers it).
type Approval struct {
	Outcome string `json:"outcome" ch:"approval_outcome,lc"` // requested, approved, denied, timeout, ended, repeat, covered, refused, same-action
	ID      string `json:"id" ch:"approval_id"`              // the request's id (berm approve ID)
	Action  string `json:"action" ch:"approval_action,lc"`   // unlink, rename, write, exec, connect
	Syscall string `json:"syscall" ch:"syscall,lc"`          // the syscall held
	Object  string `json:"object" ch:"path"`                 // the path (old -> new for a rename), or address:port
	Rule    string `json:"rule" ch:"rule,lc"`                // the spec.approvals rule's name
	By      string `json:"by,omitempty" ch:"approval_by,lc"` // who decided (refused: who the token or peer is)
	// Claimed is the name a refused decision's maker gave (refused: not theirs to give).
	Claimed string `json:"claimed,omitempty"`
	Channel string `json:"channel,omitempty" ch:"approval_channel,lc"` // api, prompt, broker
	Reason  string `json:"reason,omitempty"`                           // the decider's reason
	// LatencyNs is how long the request waited for its decision.
	LatencyNs int64 `json:"latency_ns,omitempty" ch:"approval_latency_ns"`
	// Result is what the held syscall returned to the tool (the supervisor performed an
	// approved action itself): a value, or -errno.
	Result    int64    `json:"result" ch:"result"`
	Approvers []string `json:"approvers,omitempty"` // who the rule names as deciders
}

// Aggregate counts a call's events of one kind and object past its event budget.
type Aggregate struct {
	Kind   Kind   `json:"kind"`             // the kind of the events counted
	Object string `json:"object"`           // path, address, syscall name; "(other)" past the key bound
	Count  uint64 `json:"count"`            // events aggregated
	Failed uint64 `json:"failed,omitempty"` // of which returned an error
	First  uint64 `json:"first_seq"`        // sequence number of the first of them
	Last   uint64 `json:"last_seq"`         // sequence number of the last of them
}

// DNS is one query of the call to berm's resolver, where all of its port-53 traffic goes, and
// what the resolver did with it: answered (its addresses pinned for the call), refused, or in
// audit mode answered though it would have been refused.
type DNS struct {
	Name      string   `json:"name" ch:"path"`              // the name asked, lowercase, without the root's dot
	Type      string   `json:"type" ch:"dns_type,lc"`       // the question's type: A, AAAA, TXT, ...
	Rcode     string   `json:"rcode" ch:"errno,lc"`         // the answer's response code: NOERROR, NXDOMAIN, REFUSED, SERVFAIL
	Verdict   string   `json:"verdict" ch:"dns_verdict,lc"` // DNSAllowed, DNSRefused or DNSAuditRefused
	Rule      string   `json:"rule,omitempty" ch:"rule,lc"` // the domain rule that allowed it (spec.network.egress[i])
	Answers   []string `json:"answers,omitempty"`           // addresses answered (and pinned for the call)
	CNAMEs    []string `json:"cnames,omitempty"`            // the CNAME chain from Name to the addresses
	TTL       uint32   `json:"ttl,omitempty"`               // the smallest TTL of the chain, seconds
	Transport string   `json:"transport,omitempty"`         // udp or tcp
	Detail    string   `json:"detail,omitempty"`            // why it failed, when the upstream did not answer
	// Internal are the answer's addresses in internal ranges that no rule for the name allows
	// (allowPrivate): withheld from the reply, or in audit mode what would have been (DNS
	// rebinding).
	Internal []string `json:"internal,omitempty"`
}

// Verdicts of a DNS query.
const (
	DNSAllowed      = "allowed"       // a domain rule names it: asked upstream, answers pinned
	DNSRefused      = "refused"       // no rule names it: answered REFUSED
	DNSAuditRefused = "audit-refused" // audit mode: answered, but would have been refused
)

// PhaseSetup marks events of berm's own sandbox set-up.
const PhaseSetup = "setup"

// MCP is a tools/call (or another request) berm's MCP proxy relayed to the MCP server the call
// runs, as the proxy saw it: Phase "start" when it passed the request on, "end" when the
// server's answer came back (or none could: Status says). The server's kernel events between
// the two are the ones it made while serving the request: the proxy relays one tools/call at
// a time. These are berm's own observations (the proxy is berm, outside the sandbox), never
// the server's word.
type MCP struct {
	Phase     string `json:"phase" ch:"mcp_phase,lc"`        // start, end
	Method    string `json:"method" ch:"mcp_method,lc"`      // tools/call, ...
	Name      string `json:"name,omitempty" ch:"path"`       // the tool called (tools/call's params.name)
	RequestID string `json:"request_id" ch:"mcp_request_id"` // the JSON-RPC id, as its JSON text
	Session   string `json:"session,omitempty"`              // the proxy's session
	Arguments string `json:"arguments,omitempty"`            // the call's arguments, redacted and capped (start)
	// Status is the end's: ok, tool_error (the result's isError), error (a JSON-RPC error),
	// no_reply (the server ended, or the proxy was stopped, before it answered).
	Status     string `json:"status,omitempty" ch:"mcp_status,lc"`
	DurationNs int64  `json:"duration_ns,omitempty"` // from start to end (end)
}
