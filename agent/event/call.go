package event

import "time"

// EndReason says why a call ended. The values are stable: they are stored, queried and used as
// metric labels.
type EndReason string

const (
	EndExit        EndReason = "exit"         // the tool exited by itself
	EndSignal      EndReason = "signal"       // the tool was killed by a signal not sent by berm
	EndTimeout     EndReason = "timeout"      // wall-time cap
	EndMemoryLimit EndReason = "memory_limit" // the memory cap's OOM killer fired
	EndPidsLimit   EndReason = "pids_limit"   // the tool tried to exceed the process cap
	EndOutputLimit EndReason = "output_limit" // stdout+stderr exceeded the output cap
	EndTmpLimit    EndReason = "tmp_limit"    // the private /tmp filled up
	EndDiskLimit   EndReason = "disk_limit"   // the call added more blocks or inodes to its workspace's file system than its budget
	EndInterrupted EndReason = "interrupted"  // berm run was interrupted (SIGINT/SIGTERM)
	EndClientLost  EndReason = "client_lost"  // the launching client went away mid-call (daemon)
	EndPolicyKill  EndReason = "policy_kill"  // the tool attempted a syscall its policy marks fatal
	EndSetupFailed EndReason = "setup_failed" // the sandbox could not be set up; the tool never ran
	EndUnknown     EndReason = "incomplete"   // no end was recorded (the writer died)
)

// CallStart is written to the journal before the tool's first instruction.
type CallStart struct {
	CallID     string    `json:"call_id"`
	Tool       string    `json:"tool"`
	Tenant     string    `json:"tenant"`
	Argv       []string  `json:"argv"`
	Policy     string    `json:"policy"`
	PolicyHash string    `json:"policy_hash,omitempty"`
	Start      time.Time `json:"start"`
	CgroupID   uint64    `json:"cgroup_id"`
	Node       string    `json:"node"`
	Layers     []string  `json:"layers"` // enforcement and observation layers active for the call
}

// Limits are the resource caps a call ran under.
type Limits struct {
	MemoryBytes int64         `json:"memory_bytes"`
	Pids        int64         `json:"pids"`
	CPUs        float64       `json:"cpus"`
	WallTime    time.Duration `json:"wall_time_ns"`
	OutputBytes int64         `json:"output_bytes"`
	TmpBytes    int64         `json:"tmp_bytes"`
}

// CallRecord is the summary of one finished call.
type CallRecord struct {
	CallStart
	End          time.Time         `json:"end"`
	ExitStatus   int               `json:"exit_status"` // what berm run exits with: the code, or 128+signal
	ExitCode     int               `json:"exit_code"`
	ExitSignal   int               `json:"exit_signal,omitempty"`
	EndReason    EndReason         `json:"end_reason"`
	EndDetail    string            `json:"end_detail,omitempty"`
	Limits       Limits            `json:"limits"`
	CPUTimeNs    uint64            `json:"cpu_time_ns"`
	PeakMemory   uint64            `json:"peak_memory_bytes"`
	OutputBytes  int64             `json:"output_bytes"`
	Syscalls     map[string]uint64 `json:"syscalls"` // name -> count, aggregated in the kernel
	SyscallTotal uint64            `json:"syscall_total"`
	Counts       Counts            `json:"counts"`
	Denials      map[string]uint64 `json:"denials"` // surface -> count
	Dropped      Drop              `json:"dropped"`
	Events       uint64            `json:"events"` // events recorded for the call
	// Leftovers are what the call left in its workspace that the policy does not let stay
	// there (setuid/setgid bits, FIFOs, sockets, device nodes), with what berm did about each.
	// LeftoversTruncated: the scan stopped at its bound, or the list at its cap.
	Leftovers          []Leftover `json:"leftovers,omitempty"`
	LeftoversTruncated bool       `json:"leftovers_truncated,omitempty"`
}

// Leftover is one thing found in the workspace after the call.
type Leftover struct {
	Path   string `json:"path"`   // relative to the workspace
	Kind   string `json:"kind"`   // setuid, setgid, fifo, socket, device
	Action string `json:"action"` // cleared, removed, kept (allowed by the policy, or audit mode), or why it failed
}

// Counts are per-kind event totals of the call.
type Counts struct {
	Exec    uint64 `json:"exec"`
	Fork    uint64 `json:"fork"`
	Exit    uint64 `json:"exit"`
	Open    uint64 `json:"open"`
	Connect uint64 `json:"connect"`
	Syscall uint64 `json:"syscall"`
	Denial  uint64 `json:"denial"`
	Alert   uint64 `json:"alert"`
}

// Add counts e in c.
func (c *Counts) Add(e *Event) {
	switch e.Kind {
	case KindExec:
		c.Exec++
	case KindFork:
		c.Fork++
	case KindExit:
		c.Exit++
	case KindOpen:
		c.Open++
	case KindConnect:
		c.Connect++
	case KindSyscall:
		c.Syscall++
	case KindDenial:
		c.Denial++
	case KindAlert:
		c.Alert++
	}
}
