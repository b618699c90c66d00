package collector

import (
	"net/netip"
	"sort"
	"time"

	"github.com/bermsec/berm/agent/event"
)

// parts are the kind-specific parts of an event, stored as one JSON object in the detail
// column: {"open":{...}}. Only set parts are written, so any combination round-trips.
type parts struct {
	Exec    *event.Exec    `json:"exec,omitempty"`
	Fork    *event.Fork    `json:"fork,omitempty"`
	Exit    *event.Exit    `json:"exit,omitempty"`
	Open    *event.Open    `json:"open,omitempty"`
	Connect *event.Connect `json:"connect,omitempty"`
	Syscall *event.Syscall `json:"syscall,omitempty"`
	Denial  *event.Denial  `json:"denial,omitempty"`
	Alert   *event.Alert   `json:"alert,omitempty"`
	Drop    *event.Drop    `json:"drop,omitempty"`
	Limit   *event.Limit   `json:"limit,omitempty"`
}

func partsOf(e *event.Event) parts {
	return parts{e.Exec, e.Fork, e.Exit, e.Open, e.Connect, e.Syscall, e.Denial, e.Alert, e.Drop, e.Limit}
}

func (p parts) setOn(e *event.Event) {
	e.Exec, e.Fork, e.Exit, e.Open, e.Connect = p.Exec, p.Fork, p.Exit, p.Open, p.Connect
	e.Syscall, e.Denial, e.Alert, e.Drop, e.Limit = p.Syscall, p.Denial, p.Alert, p.Drop, p.Limit
}

// column is one column of an insert: its name and the values, a typed slice.
type column struct {
	name   string
	values any
}

// eventRows are the events table's rows, column by column (clickhouse-go appends a typed
// slice per column far faster than row by row).
type eventRows struct {
	tenant, tool, callID []string
	seq                  []uint64
	time                 []time.Time
	timeNs               []uint32
	kind                 []string
	pid, tid, ppid, uid  []uint32
	comm, exe, parentExe []string
	path                 []string
	addr                 [][16]byte
	port                 []uint16
	result               []int64
	errno, syscall, rule []string
	detail               []string
}

func (r *eventRows) len() int { return len(r.seq) }

// eventRow is an event as the events table (and, for an alert, the alerts table) stores it:
// decoding makes these on several goroutines, batches add them in journal order.
type eventRow struct {
	tenant, tool, callID, kind string
	seq                        uint64
	time                       time.Time // UTC
	pid, tid, ppid, uid        uint32
	comm, exe, parentExe       string
	path                       string
	addr                       [16]byte
	port                       uint16
	result                     int64
	errno, syscall, rule       string
	detail                     string       // the parts as JSON (partsOf)
	alert                      *event.Alert // for an alert, its row in the alerts table
}

// rowOf makes an event's row; detail is its parts as JSON.
func rowOf(e *event.Event, detail string) eventRow {
	r := eventRow{
		tenant: e.Tenant, tool: e.Tool, callID: e.CallID, kind: string(e.Kind), seq: e.Seq,
		time: e.Time.UTC(), pid: e.PID, tid: e.TID, ppid: e.PPID, uid: e.UID,
		comm: e.Comm, exe: e.Exe, parentExe: e.ParentExe, detail: detail,
	}
	switch {
	case e.Open != nil:
		r.path, r.result, r.errno = e.Open.Path, e.Open.Result, e.Open.Errno
	case e.Connect != nil:
		r.result, r.errno, r.port = e.Connect.Result, e.Connect.Errno, e.Connect.Port
		if ip, err := netip.ParseAddr(e.Connect.Addr); err == nil {
			r.addr = ip.As16()
		} else {
			r.path = e.Connect.Addr // a unix socket
		}
	case e.Syscall != nil:
		r.path, r.result, r.errno, r.syscall = e.Syscall.Path, e.Syscall.Result, e.Syscall.Errno, e.Syscall.Name
	case e.Exec != nil:
		r.path = e.Exec.Filename
	case e.Denial != nil:
		r.path, r.rule = e.Denial.Object, e.Denial.Rule
	case e.Alert != nil:
		r.rule = e.Alert.RuleID
	case e.Exit != nil:
		r.result = int64(e.Exit.Code)
	}
	if e.Kind == event.KindAlert {
		r.alert = e.Alert
	}
	return r
}

func (r *eventRows) add(e *eventRow) {
	r.tenant = append(r.tenant, e.tenant)
	r.tool = append(r.tool, e.tool)
	r.callID = append(r.callID, e.callID)
	r.seq = append(r.seq, e.seq)
	r.time = append(r.time, e.time)
	r.timeNs = append(r.timeNs, uint32(e.time.Nanosecond()))
	r.kind = append(r.kind, e.kind)
	r.pid = append(r.pid, e.pid)
	r.tid = append(r.tid, e.tid)
	r.ppid = append(r.ppid, e.ppid)
	r.uid = append(r.uid, e.uid)
	r.comm = append(r.comm, e.comm)
	r.exe = append(r.exe, e.exe)
	r.parentExe = append(r.parentExe, e.parentExe)
	r.path = append(r.path, e.path)
	r.addr = append(r.addr, e.addr)
	r.port = append(r.port, e.port)
	r.result = append(r.result, e.result)
	r.errno = append(r.errno, e.errno)
	r.syscall = append(r.syscall, e.syscall)
	r.rule = append(r.rule, e.rule)
	r.detail = append(r.detail, e.detail)
}

func (r *eventRows) columns(d Dialect) []column {
	cols := []column{
		{"tenant", r.tenant}, {"tool", r.tool}, {"call_id", r.callID}, {"seq", r.seq},
		{"time", r.time},
	}
	if d == Legacy {
		cols = append(cols, column{"time_ns", r.timeNs})
	}
	cols = append(cols,
		column{"kind", r.kind}, column{"pid", r.pid}, column{"tid", r.tid}, column{"ppid", r.ppid},
		column{"uid", r.uid}, column{"comm", r.comm}, column{"exe", r.exe},
		column{"parent_exe", r.parentExe}, column{"path", r.path}, column{"addr", addrValues(d, r.addr)},
		column{"port", r.port}, column{"result", r.result}, column{"errno", r.errno},
		column{"syscall", r.syscall}, column{"rule", r.rule}, column{"detail", r.detail},
	)
	return cols
}

// addrValues gives IPv6 columns the 16-byte arrays and legacy FixedString(16) columns the
// same bytes as strings (what IPv6StringToNum stores there).
func addrValues(d Dialect, addr [][16]byte) any {
	if d == Modern {
		return addr
	}
	out := make([][]byte, len(addr))
	for i := range addr {
		out[i] = addr[i][:]
	}
	return out
}

// reset empties the rows and keeps their memory, sized for n rows: a collector reuses its
// few batches instead of growing new slices for every one.
func (r *eventRows) reset(n int) {
	r.tenant, r.tool, r.callID = resize(r.tenant, n), resize(r.tool, n), resize(r.callID, n)
	r.seq, r.time, r.timeNs, r.kind = resize(r.seq, n), resize(r.time, n), resize(r.timeNs, n), resize(r.kind, n)
	r.pid, r.tid, r.ppid, r.uid = resize(r.pid, n), resize(r.tid, n), resize(r.ppid, n), resize(r.uid, n)
	r.comm, r.exe, r.parentExe, r.path = resize(r.comm, n), resize(r.exe, n), resize(r.parentExe, n), resize(r.path, n)
	r.addr, r.port, r.result = resize(r.addr, n), resize(r.port, n), resize(r.result, n)
	r.errno, r.syscall, r.rule, r.detail = resize(r.errno, n), resize(r.syscall, n), resize(r.rule, n), resize(r.detail, n)
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	clear(s[:cap(s)]) // drop references to the last batch's strings
	return s[:0]
}

// alertRows are the alerts table's rows.
type alertRows struct {
	tenant, tool, callID []string
	seq                  []uint64
	time                 []time.Time
	timeNs               []uint32
	ruleID, title        []string
	severity, surface    []string
	technique            [][]string
	output               []string
	eventSeq             []uint64
}

func (r *alertRows) len() int { return len(r.seq) }

func (r *alertRows) add(e *eventRow) {
	a := e.alert
	tech := a.Technique
	if tech == nil {
		tech = []string{}
	}
	r.tenant = append(r.tenant, e.tenant)
	r.tool = append(r.tool, e.tool)
	r.callID = append(r.callID, e.callID)
	r.seq = append(r.seq, e.seq)
	r.time = append(r.time, e.time)
	r.timeNs = append(r.timeNs, uint32(e.time.Nanosecond()))
	r.ruleID = append(r.ruleID, a.RuleID)
	r.title = append(r.title, a.Title)
	r.severity = append(r.severity, a.Severity)
	r.surface = append(r.surface, a.Surface)
	r.technique = append(r.technique, tech)
	r.output = append(r.output, a.Output)
	r.eventSeq = append(r.eventSeq, a.EventSeq)
}

func (r *alertRows) columns(d Dialect) []column {
	cols := []column{
		{"tenant", r.tenant}, {"tool", r.tool}, {"call_id", r.callID}, {"seq", r.seq}, {"time", r.time},
	}
	if d == Legacy {
		cols = append(cols, column{"time_ns", r.timeNs})
	}
	return append(cols,
		column{"rule_id", r.ruleID}, column{"title", r.title}, column{"severity", r.severity},
		column{"surface", r.surface}, column{"technique", r.technique}, column{"output", r.output},
		column{"event_seq", r.eventSeq},
	)
}

// startRows are the call_starts table's rows. raw is the record as the journal holds it, so
// that a call read back from ClickHouse is exactly the call read from the journal.
type startRows struct {
	tenant, tool, callID []string
	start                []time.Time
	startNs              []uint32
	node, policy, hash   []string
	cgroupID             []uint64
	argv, layers         [][]string
	raw                  []string
}

func (r *startRows) len() int { return len(r.callID) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (r *startRows) add(s *event.CallStart, raw string) {
	t := s.Start.UTC()
	r.tenant = append(r.tenant, s.Tenant)
	r.tool = append(r.tool, s.Tool)
	r.callID = append(r.callID, s.CallID)
	r.start = append(r.start, t)
	r.startNs = append(r.startNs, uint32(t.Nanosecond()))
	r.node = append(r.node, s.Node)
	r.policy = append(r.policy, s.Policy)
	r.hash = append(r.hash, s.PolicyHash)
	r.cgroupID = append(r.cgroupID, s.CgroupID)
	r.argv = append(r.argv, nonNil(s.Argv))
	r.layers = append(r.layers, nonNil(s.Layers))
	r.raw = append(r.raw, raw)
}

func (r *startRows) columns(d Dialect) []column {
	cols := []column{{"tenant", r.tenant}, {"tool", r.tool}, {"call_id", r.callID}, {"start_time", r.start}}
	if d == Legacy {
		cols = append(cols, column{"start_ns", r.startNs})
	}
	return append(cols,
		column{"node", r.node}, column{"policy", r.policy}, column{"policy_hash", r.hash},
		column{"cgroup_id", r.cgroupID}, column{"argv", r.argv}, column{"layers", r.layers},
		column{"raw", r.raw},
	)
}

// callRows are the calls table's rows: one per call record.
type callRows struct {
	tenant, tool, callID               []string
	start, end                         []time.Time
	startNs, endNs                     []uint32
	duration                           []int64
	node, policy, hash                 []string
	argv, layers                       [][]string
	exitStatus, exitCode, exitSignal   []int32
	endReason, endDetail               []string
	cpuTime, peakMemory                []uint64
	outputBytes                        []int64
	syscallTotal                       []uint64
	syscallNames, denialSurfaces       [][]string
	syscallCounts, denialCounts        [][]uint64
	events, alerts, dropKern, dropUser []uint64
	raw                                []string
}

func (r *callRows) len() int { return len(r.callID) }

func mapColumns(m map[string]uint64) ([]string, []uint64) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	counts := make([]uint64, len(names))
	for i, k := range names {
		counts[i] = m[k]
	}
	return names, counts
}

func (r *callRows) add(c *event.CallRecord, raw string) {
	start, end := c.Start.UTC(), c.End.UTC()
	r.tenant = append(r.tenant, c.Tenant)
	r.tool = append(r.tool, c.Tool)
	r.callID = append(r.callID, c.CallID)
	r.start = append(r.start, start)
	r.startNs = append(r.startNs, uint32(start.Nanosecond()))
	r.end = append(r.end, end)
	r.endNs = append(r.endNs, uint32(end.Nanosecond()))
	r.duration = append(r.duration, int64(end.Sub(start)))
	r.node = append(r.node, c.Node)
	r.policy = append(r.policy, c.Policy)
	r.hash = append(r.hash, c.PolicyHash)
	r.argv = append(r.argv, nonNil(c.Argv))
	r.layers = append(r.layers, nonNil(c.Layers))
	r.exitStatus = append(r.exitStatus, int32(c.ExitStatus))
	r.exitCode = append(r.exitCode, int32(c.ExitCode))
	r.exitSignal = append(r.exitSignal, int32(c.ExitSignal))
	r.endReason = append(r.endReason, string(c.EndReason))
	r.endDetail = append(r.endDetail, c.EndDetail)
	r.cpuTime = append(r.cpuTime, c.CPUTimeNs)
	r.peakMemory = append(r.peakMemory, c.PeakMemory)
	r.outputBytes = append(r.outputBytes, c.OutputBytes)
	r.syscallTotal = append(r.syscallTotal, c.SyscallTotal)
	names, counts := mapColumns(c.Syscalls)
	r.syscallNames = append(r.syscallNames, names)
	r.syscallCounts = append(r.syscallCounts, counts)
	names, counts = mapColumns(c.Denials)
	r.denialSurfaces = append(r.denialSurfaces, names)
	r.denialCounts = append(r.denialCounts, counts)
	r.events = append(r.events, c.Events)
	r.alerts = append(r.alerts, c.Counts.Alert)
	r.dropKern = append(r.dropKern, c.Dropped.Kernel)
	r.dropUser = append(r.dropUser, c.Dropped.User)
	r.raw = append(r.raw, raw)
}

func (r *callRows) columns(d Dialect) []column {
	cols := []column{{"tenant", r.tenant}, {"tool", r.tool}, {"call_id", r.callID}, {"start_time", r.start}}
	if d == Legacy {
		cols = append(cols, column{"start_ns", r.startNs})
	}
	cols = append(cols, column{"end_time", r.end})
	if d == Legacy {
		cols = append(cols, column{"end_ns", r.endNs})
	}
	return append(cols,
		column{"duration_ns", r.duration}, column{"node", r.node}, column{"policy", r.policy},
		column{"policy_hash", r.hash}, column{"argv", r.argv}, column{"layers", r.layers},
		column{"exit_status", r.exitStatus}, column{"exit_code", r.exitCode},
		column{"exit_signal", r.exitSignal}, column{"end_reason", r.endReason},
		column{"end_detail", r.endDetail}, column{"cpu_time_ns", r.cpuTime},
		column{"peak_memory_bytes", r.peakMemory}, column{"output_bytes", r.outputBytes},
		column{"syscall_total", r.syscallTotal}, column{"syscall_names", r.syscallNames},
		column{"syscall_counts", r.syscallCounts}, column{"denial_surfaces", r.denialSurfaces},
		column{"denial_counts", r.denialCounts}, column{"events", r.events},
		column{"alerts", r.alerts}, column{"dropped_kernel", r.dropKern},
		column{"dropped_user", r.dropUser}, column{"raw", r.raw},
	)
}
