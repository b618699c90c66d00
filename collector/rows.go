package collector

import (
	"sort"
	"time"

	"github.com/bermsec/berm/agent/event"
)

// column is one column of an insert: its name and the values, a typed slice.
type column struct {
	name   string
	values any
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
	callKey              []string
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
	r.callKey = append(r.callKey, e.callKey)
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
		column{"event_seq", r.eventSeq}, column{"call_key", r.callKey},
	)
}

// startRows are the call_starts table's rows. raw is the record as the journal holds it, so
// that a call read back from ClickHouse is exactly the call read from the journal.
type startRows struct {
	tenant, tool, callID []string
	callKey              []string
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
	r.callKey = append(r.callKey, s.CallKey)
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
		column{"raw", r.raw}, column{"call_key", r.callKey},
	)
}

// callRows are the calls table's rows: one per call record.
type callRows struct {
	tenant, tool, callID, callKey               []string
	start, end                                  []time.Time
	startNs, endNs                              []uint32
	duration                                    []int64
	node, policy, hash                          []string
	argv, layers                                [][]string
	exitStatus, exitCode, exitSignal            []int32
	endReason, endDetail                        []string
	cpuTime, peakMemory                         []uint64
	outputBytes                                 []int64
	syscallTotal                                []uint64
	syscallNames, denialSurfaces                [][]string
	syscallCounts, denialCounts                 [][]uint64
	events, alerts, dropKern, dropUser, dropDNS []uint64
	raw                                         []string
	surfaces                                    // CallRecord.Surfaces (surfaces.go)
	callColumns                                 // the columns CallRecord's ch tags map (rows_gen.go)
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
	r.callKey = append(r.callKey, c.CallKey)
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
	r.dropDNS = append(r.dropDNS, c.Dropped.DNS)
	r.raw = append(r.raw, raw)
	r.surfaces.add(c.Surfaces)
	r.callColumns.add(c)
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
	return append(append(cols,
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
		column{"dropped_user", r.dropUser}, column{"dropped_dns", r.dropDNS}, column{"raw", r.raw},
		column{"call_key", r.callKey},
	), append(r.surfaces.columns(), r.callColumns.columns()...)...)
}
