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
	CallID string `json:"call_id"` // the call's id, as its caller named it
	// CallKey is the call's identity, assigned by berm when the call begins and unique to it:
	// a caller's id may be reused (by another tenant, or after the call ended), its key never.
	// Trails, rules state and ClickHouse rows of a call are keyed by it.
	CallKey    string    `json:"call_key"`
	Tool       string    `json:"tool"`                  // the tool the call ran
	Tenant     string    `json:"tenant"`                // the tenant the call ran for
	Argv       []string  `json:"argv"`                  // the tool's command line
	Policy     string    `json:"policy"`                // the policy's name
	PolicyHash string    `json:"policy_hash,omitempty"` // hash of the compiled policy
	Start      time.Time `json:"start"`                 // when the sandbox was set up
	CgroupID   uint64    `json:"cgroup_id"`             // the call's cgroup, its identity in the kernel
	Node       string    `json:"node"`                  // the host the call ran on
	Layers     []string  `json:"layers"`                // enforcement and observation layers active for the call (Layer* names)
	// Mode is the policy's mode: enforce, or audit (every would-be denial recorded, nothing
	// blocked).
	Mode         string `json:"mode,omitempty"`
	LandlockABI  int    `json:"landlock_abi,omitempty"`   // the Landlock ABI enforced, when the landlock layer is active
	MCPSession   string `json:"mcp_session,omitempty"`    // the MCP session the call serves (berm mcp serve's tools/call)
	MCPRequestID string `json:"mcp_request_id,omitempty"` // the JSON-RPC id of that tools/call, as its JSON text
	// TraceParent is the W3C traceparent of the caller's span (berm run --traceparent, an MCP
	// request's _meta.traceparent): the call's OpenTelemetry span is its child. Empty: none.
	TraceParent string `json:"traceparent,omitempty"`
}

// Limits are the resource caps a call ran under.
type Limits struct {
	MemoryBytes int64         `json:"memory_bytes"` // memory cap
	Pids        int64         `json:"pids"`         // process cap
	CPUs        float64       `json:"cpus"`         // CPU quota in CPUs
	WallTime    time.Duration `json:"wall_time_ns"` // wall-time cap
	OutputBytes int64         `json:"output_bytes"` // stdout+stderr cap
	TmpBytes    int64         `json:"tmp_bytes"`    // size of the private /tmp
}

// RecordVersion is the version of the call record's JSON (sandboxer/RECORD.md): it grows when
// a field is removed, renamed or changes its meaning; a new field keeps it. Records written
// before it existed have none (0).
const RecordVersion = 1

// CallRecord is the summary of one finished call.
type CallRecord struct {
	CallStart
	// RecordVersion is the version of this JSON's schema (RecordVersion when written; 0 in
	// records written before there was one).
	RecordVersion int               `json:"record_version"`
	End           time.Time         `json:"end"`                   // when the call ended
	ExitStatus    int               `json:"exit_status"`           // what berm run exits with: the tool's code or 128+signal, or the status of the end berm made (EndedStatus)
	ExitCode      int               `json:"exit_code"`             // the tool's exit code
	ExitSignal    int               `json:"exit_signal,omitempty"` // the signal that killed the tool
	EndReason     EndReason         `json:"end_reason"`            // why the call ended
	EndDetail     string            `json:"end_detail,omitempty"`  // more on the end, in words
	Limits        Limits            `json:"limits"`                // the caps the call ran under
	CPUTimeNs     uint64            `json:"cpu_time_ns"`           // CPU time of the call's cgroup
	PeakMemory    uint64            `json:"peak_memory_bytes"`     // peak memory of the call's cgroup
	OutputBytes   int64             `json:"output_bytes"`          // stdout+stderr the tool wrote
	Syscalls      map[string]uint64 `json:"syscalls"`              // name -> count, aggregated in the kernel
	SyscallTotal  uint64            `json:"syscall_total"`         // syscalls of the call, all of them
	Counts        Counts            `json:"counts"`                // events per kind
	Denials       map[string]uint64 `json:"denials"`               // surface -> count
	Dropped       Drop              `json:"dropped"`               // events lost, and where
	Events        uint64            `json:"events"`                // events recorded for the call
	// Aggregated are events past the call's event budget, recorded as counts per kind and
	// object (aggregate events) instead of one by one.
	Aggregated uint64 `json:"aggregated,omitempty" ch:"aggregated"`
	// Complete is true when the trail holds every event the kernel produced for the call;
	// IncompleteReason says otherwise what is missing and why.
	Complete         bool   `json:"complete" ch:"complete"`
	IncompleteReason string `json:"incomplete_reason,omitempty" ch:"incomplete_reason"` // what is missing, and why
	// Leftovers are what the call left in its workspace that the policy does not let stay
	// there (setuid/setgid bits, FIFOs, sockets, device nodes), with what berm did about each.
	Leftovers []Leftover `json:"leftovers,omitempty"`
	// LeftoversTruncated: the scan stopped at its bound, or the list at its cap.
	LeftoversTruncated bool `json:"leftovers_truncated,omitempty"`
	// Surfaces say how each of the six surfaces stood for the call, one per surface in
	// Surfaces order (policy.SurfaceStates computes them). ClickHouse holds them as parallel
	// arrays (surfaces, surface_states, surface_layers, surface_violations), mapped by hand.
	Surfaces []SurfaceState `json:"surfaces,omitempty" ch:"-"`
	// Credentials are the brokered credentials the call received (names and fingerprints).
	Credentials []CredentialUse `json:"credentials,omitempty"`
	// Alerts are the call's alerts in the order they fired, the first MaxRecordAlerts of them;
	// AlertsOmitted counts the ones past that bound (Counts.Alert is every one of them).
	Alerts []AlertRef `json:"alerts,omitempty"`
	// AlertsOmitted are the call's alerts not in Alerts: past its bound of MaxRecordAlerts.
	AlertsOmitted uint64 `json:"alerts_omitted,omitempty"`
}

// MaxRecordAlerts bounds a record's list of alerts: a call that trips rules in a loop has a
// record of bounded size, and says how many it left out (CallRecord.AlertsOmitted).
const MaxRecordAlerts = 64

// AlertRef is one alert of a call, as its record lists it: which rule, how bad, and where it
// is in the call's trail (berm timeline shows the alert event and the event that tripped it).
type AlertRef struct {
	Seq      uint64 `json:"seq"`       // the alert event's place in the call's trail
	EventSeq uint64 `json:"event_seq"` // the event that tripped the rule (0: none, an alert of the call as a whole)
	RuleID   string `json:"rule_id"`   // the rule's id
	Severity string `json:"severity"`  // info, low, medium, high, critical
	Title    string `json:"title"`     // the rule's title
	Surface  string `json:"surface"`   // the surface the rule guards
}

// AppendAlert lists the alert event ev after list, or counts it in omitted past the bound of
// MaxRecordAlerts.
func AppendAlert(list []AlertRef, omitted uint64, ev *Event) ([]AlertRef, uint64) {
	if ev.Alert == nil {
		return list, omitted
	}
	if len(list) >= MaxRecordAlerts {
		return list, omitted + 1
	}
	a := ev.Alert
	return append(list, AlertRef{Seq: ev.Seq, EventSeq: a.EventSeq, RuleID: a.RuleID, Severity: a.Severity, Title: a.Title, Surface: a.Surface}), omitted
}

// SurfaceState is how one surface stood for a call.
type SurfaceState struct {
	Surface string   `json:"surface"` // Surface* name
	State   string   `json:"state"`   // State* name: enforced, audit, degraded, absent
	Layers  []string `json:"layers"`  // the Layer* names that enforced (or, in audit mode, watched) it
	// Reason says why a degraded surface is: the layer missing and the rules it leaves
	// unenforced, or the events lost. Empty in every other state.
	Reason string `json:"reason,omitempty"`
	// Violated: denials, alerts or cap hits were attributed to the surface (Violations of them).
	Violated   bool   `json:"violated"`
	Violations uint64 `json:"violations"` // denials (audit mode's would-be denials too), alerts and cap hits
}

// Leftover is one thing found in the workspace after the call.
type Leftover struct {
	Path   string `json:"path"`   // relative to the workspace
	Kind   string `json:"kind"`   // setuid, setgid, fifo, socket, device
	Action string `json:"action"` // cleared, removed, kept (allowed by the policy, or audit mode), or why it failed
}

// Counts are per-kind event totals of the call.
type Counts struct {
	Exec    uint64 `json:"exec"`    // exec events
	Fork    uint64 `json:"fork"`    // fork events
	Exit    uint64 `json:"exit"`    // exit events
	Open    uint64 `json:"open"`    // open events
	Connect uint64 `json:"connect"` // connect events
	Syscall uint64 `json:"syscall"` // syscall events
	Denial  uint64 `json:"denial"`  // denial events
	Alert   uint64 `json:"alert"`   // alerts
	// DNS are the call's queries its resolver recorded: answered, refused, refused over the
	// call's in-flight bound, or read unanswered at its end (Drop.DNS counts those lost before).
	DNS uint64 `json:"dns,omitempty"`
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
	case KindDNS:
		c.DNS++
	}
}
