package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// PrintCalls writes the calls as a table. Every text a tool or a caller chose is printed
// through Safe: no field can break the table or the terminal.
func PrintCalls(w io.Writer, calls []Call) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL ID\tTOOL\tTENANT\tSTART\tDURATION\tEND\tSTATUS\tEVENTS\tDENIALS\tDROPPED\tCOMPLETE")
	for _, c := range calls {
		s := c.Start
		if c.Record == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t%s\t-\t-\t-\t-\tno\n", Safe(s.CallID), Safe(s.Tool), Safe(s.Tenant), s.Start.UTC().Format(time.RFC3339), event.EndUnknown)
			continue
		}
		r := c.Record
		var denials uint64
		for _, n := range r.Denials {
			denials += n
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", Safe(s.CallID), Safe(s.Tool), Safe(s.Tenant),
			s.Start.UTC().Format(time.RFC3339), r.End.Sub(s.Start).Round(time.Millisecond), Safe(string(r.EndReason)),
			r.ExitStatus, r.Events, denials, r.Dropped.Kernel+r.Dropped.User+r.Dropped.DNS, completeness(r, false))
	}
	return tw.Flush()
}

// PrintCallsJSON writes the calls as a JSON array.
func PrintCallsJSON(w io.Writer, calls []Call) error {
	if calls == nil {
		calls = []Call{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(calls)
}

// TimelineJSON is the --json form of a timeline.
type TimelineJSON struct {
	Call   *Call         `json:"call"`
	Events []event.Event `json:"events"`
}

// PrintTimelineJSON writes the call and its events as one JSON object.
func PrintTimelineJSON(w io.Writer, c *Call, evs []event.Event) error {
	if evs == nil {
		evs = []event.Event{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(TimelineJSON{Call: c, Events: evs})
}

// PrintTimeline writes a call's header and its events, one line each, in order. Every text a
// tool or a caller chose is printed through Safe: a file named "x\n42 ..." or holding escape
// sequences shows as escapes, it cannot forge a row or rewrite the terminal.
func PrintTimeline(w io.Writer, c *Call, evs []event.Event) error {
	PrintTimelineHeader(w, c)
	return PrintEvents(w, c.Start.Start, evs, true)
}

// PrintTimelineHeader writes a call's header: its start, and its end when it has one.
func PrintTimelineHeader(w io.Writer, c *Call) {
	s := c.Start
	fmt.Fprintf(w, "call %s  tool=%s  tenant=%s  policy=%s\n", Safe(s.CallID), Safe(s.Tool), Safe(s.Tenant), orDash(Safe(s.Policy)))
	fmt.Fprintf(w, "  argv:    %s\n", quoteArgv(s.Argv))
	fmt.Fprintf(w, "  started: %s on %s (cgroup %d)\n", s.Start.UTC().Format(time.RFC3339Nano), Safe(s.Node), s.CgroupID)
	fmt.Fprintf(w, "  layers:  %s\n", safeList(s.Layers, ", "))
	if r := c.Record; r != nil {
		fmt.Fprintf(w, "  ended:   +%.3fs  reason=%s  status=%d", r.End.Sub(s.Start).Seconds(), Safe(string(r.EndReason)), r.ExitStatus)
		if r.EndDetail != "" {
			fmt.Fprintf(w, "  (%s)", Safe(r.EndDetail))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  complete: %s\n", completeness(r, true))
		if len(r.Surfaces) > 0 {
			fmt.Fprintf(w, "  surfaces: %s\n", surfaceSummary(r.Surfaces))
			for _, ss := range r.Surfaces {
				if ss.Reason != "" {
					fmt.Fprintf(w, "  %s %s: %s\n", Safe(ss.State), Safe(ss.Surface), Safe(ss.Reason))
				}
			}
		}
		fmt.Fprintf(w, "  usage:   cpu=%s  peak_memory=%s  output=%s  syscalls=%d\n",
			time.Duration(r.CPUTimeNs).Round(time.Microsecond), bytesHuman(int64(r.PeakMemory)), bytesHuman(r.OutputBytes), r.SyscallTotal)
		if len(r.Syscalls) > 0 {
			fmt.Fprintf(w, "  top syscalls: %s\n", topSyscalls(r.Syscalls, 8))
		}
		dns := ""
		if r.Counts.DNS > 0 || r.Dropped.DNS > 0 {
			dns = fmt.Sprintf(" dns=%d", r.Counts.DNS)
		}
		fmt.Fprintf(w, "  counts:  exec=%d fork=%d exit=%d open=%d connect=%d denial=%d alert=%d%s  dropped=%d\n",
			r.Counts.Exec, r.Counts.Fork, r.Counts.Exit, r.Counts.Open, r.Counts.Connect, r.Counts.Denial, r.Counts.Alert, dns,
			r.Dropped.Kernel+r.Dropped.User+r.Dropped.DNS)
	} else {
		fmt.Fprintf(w, "  ended:   (no record: %s)\n", event.EndUnknown)
	}
	fmt.Fprintln(w)
}

// PrintEvents writes events one line each, their times relative to start, under a line of
// column names when head is set (berm timeline --follow prints the events as they come).
func PrintEvents(w io.Writer, start time.Time, evs []event.Event, head bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if head {
		fmt.Fprintln(tw, "SEQ\tTIME\tPID\tPROGRAM\tEVENT\tDETAIL")
	}
	for i := range evs {
		e := &evs[i]
		prog := e.Exe
		if prog == "" {
			prog = e.Comm
		}
		kind := Safe(string(e.Kind))
		if e.Phase != "" {
			kind += " (" + Safe(e.Phase) + ")"
		}
		fmt.Fprintf(tw, "%d\t+%.6f\t%d\t%s\t%s\t%s\n", e.Seq, e.Time.Sub(start).Seconds(), e.PID, orDash(Safe(prog)), kind, Describe(e))
	}
	return tw.Flush()
}

// Describe is a one-line account of an event's own part, safe to print (see Safe).
func Describe(e *event.Event) string {
	switch {
	case e.Exec != nil:
		d := fmt.Sprintf("%s %s", Safe(e.Exec.Filename), quoteArgv(e.Exec.Argv))
		if e.Exec.Truncated {
			d += fmt.Sprintf(" [argv truncated, %d bytes]", e.Exec.ArgsLen)
		}
		if e.Exec.EnvTruncated {
			d += fmt.Sprintf(" [env of %d bytes: its end not scanned for secrets]", e.Exec.EnvLen)
		}
		if e.Exec.Setuid {
			d += " [setuid]"
		}
		if e.Exec.Deleted {
			d += " [deleted/memfd: " + Safe(e.Exec.ExeName) + "]"
		}
		return d
	case e.Fork != nil:
		return fmt.Sprintf("child %d", e.Fork.ChildPID)
	case e.Exit != nil:
		if e.Exit.Signal != 0 {
			return fmt.Sprintf("killed by signal %d", e.Exit.Signal)
		}
		return fmt.Sprintf("exit %d", e.Exit.Code)
	case e.Open != nil:
		o := e.Open
		d := Safe(o.Path)
		if o.PathTruncated {
			d += fmt.Sprintf(" [truncated, %d bytes]", o.PathLen)
		}
		if o.ResolvedPath != "" && o.ResolvedPath != o.Path {
			d += " (" + Safe(o.ResolvedPath) + ")"
		}
		if o.PathSource == "user" {
			d += " [path from user memory]"
		}
		return fmt.Sprintf("%s %s -> %s", d, openFlags(o.Flags), result(o.Result, o.Errno))
	case e.Connect != nil:
		addr := Safe(e.Connect.Addr)
		if e.Connect.Family == "inet6" {
			addr = "[" + addr + "]"
		}
		if e.Connect.Family == "inet" || e.Connect.Family == "inet6" {
			addr = fmt.Sprintf("%s:%d", addr, e.Connect.Port)
			// An IP destination is the kernel's copy where the connect hook saw it: say when not.
			if e.Connect.AddrSource == "user" {
				addr += " [address from user memory]"
			}
		}
		d := fmt.Sprintf("%s %s -> %s", Safe(e.Connect.Family), addr, result(e.Connect.Result, e.Connect.Errno))
		if e.Connect.Unresolved {
			d += " [never resolved for the call]"
		}
		return d
	case e.DNS != nil:
		q := e.DNS
		d := fmt.Sprintf("%s %s %s -> %s", Safe(q.Transport), Safe(q.Type), Safe(q.Name), Safe(q.Rcode))
		if len(q.CNAMEs) > 0 {
			d += " via " + Safe(strings.Join(q.CNAMEs, " > "))
		}
		if len(q.Answers) > 0 {
			d += fmt.Sprintf(" %s (ttl %d)", Safe(strings.Join(q.Answers, ",")), q.TTL)
		}
		d += " [" + Safe(q.Verdict)
		if q.Rule != "" {
			d += " by " + Safe(q.Rule)
		}
		d += "]"
		if q.Detail != "" {
			d += ": " + Safe(q.Detail)
		}
		return d
	case e.Syscall != nil:
		d := Safe(e.Syscall.Name)
		if e.Syscall.Path != "" {
			d += " " + Safe(e.Syscall.Path)
		}
		if e.Syscall.Path2 != "" {
			d += " " + Safe(e.Syscall.Path2)
		}
		// the kernel's view (BPF LSM) named another entry than the tool's memory said
		if e.Syscall.PathForged || e.Syscall.Path2Forged {
			d += " (the tool's memory said " + Safe(strings.TrimSpace(e.Syscall.ToolPath+" "+e.Syscall.ToolPath2)) + ")"
		}
		return d + " -> " + result(e.Syscall.Result, e.Syscall.Errno)
	case e.Denial != nil:
		d := fmt.Sprintf("%s denied %s (rule %s, surface %s)", Safe(e.Denial.Layer), Safe(e.Denial.Object), Safe(e.Denial.Rule), Safe(e.Denial.Surface))
		if e.Denial.Audit {
			d = "[audit] would be " + d
		}
		return d
	case e.Alert != nil:
		return fmt.Sprintf("[%s] %s: %s (event %d)", Safe(e.Alert.Severity), Safe(e.Alert.RuleID), Safe(e.Alert.Output), e.Alert.EventSeq)
	case e.Drop != nil:
		if e.Drop.DNS > 0 {
			return fmt.Sprintf("%d events lost in the kernel, %d in the agent, %d dns queries dropped before the resolver read them", e.Drop.Kernel, e.Drop.User, e.Drop.DNS)
		}
		return fmt.Sprintf("%d events lost in the kernel, %d in the agent", e.Drop.Kernel, e.Drop.User)
	case e.Limit != nil:
		d := fmt.Sprintf("%s cap hit (limit %d)", Safe(e.Limit.Resource), e.Limit.Limit)
		if e.Limit.Detail != "" {
			d += ": " + Safe(e.Limit.Detail)
		}
		return d
	case e.Reload != nil:
		r := e.Reload
		if !r.Applied {
			return fmt.Sprintf("%s policy reload refused: %s", Safe(r.Surface), Safe(r.Detail))
		}
		d := fmt.Sprintf("%s policy reloaded (generation %d)", Safe(r.Surface), r.Generation)
		if r.Detail != "" {
			d += ": " + Safe(r.Detail)
		}
		return d
	case e.Credential != nil:
		return credentialDetail(e.Credential)
	case e.Approval != nil:
		return approvalDetail(e.Approval)
	case e.MCP != nil:
		return mcpDetail(e.MCP)
	}
	return ""
}

// mcpDetail is a relayed MCP request's line: its start with the tool and arguments, or its
// end with the status and how long the server took.
func mcpDetail(m *event.MCP) string {
	d := fmt.Sprintf("mcp %s %s id %s", Safe(m.Phase), Safe(m.Method), Safe(m.RequestID))
	if m.Name != "" {
		d += " tool " + Safe(m.Name)
	}
	if m.Phase == "start" {
		if m.Arguments != "" {
			d += " " + Safe(m.Arguments)
		}
		return d
	}
	return d + fmt.Sprintf(" -> %s after %s", Safe(m.Status), time.Duration(m.DurationNs).Round(time.Microsecond))
}

// approvalDetail is an approval event's line: the request, or its outcome with who decided
// through which channel, why, after how long, and what the held syscall returned.
func approvalDetail(a *event.Approval) string {
	what := fmt.Sprintf("%s %s (rule %s, %s)", Safe(a.Action), Safe(a.Object), Safe(a.Rule), Safe(a.Syscall))
	if a.Outcome == "requested" {
		return fmt.Sprintf("approval %s requested: %s", Safe(a.ID), what)
	}
	d := fmt.Sprintf("approval %s %s: %s", Safe(a.ID), Safe(a.Outcome), what)
	if a.By != "" {
		d += " by " + Safe(a.By)
	}
	if a.Channel != "" {
		d += " via " + Safe(a.Channel)
	}
	if a.LatencyNs > 0 {
		d += fmt.Sprintf(" after %s", time.Duration(a.LatencyNs).Round(time.Millisecond))
	}
	if a.Reason != "" {
		d += ": " + Safe(a.Reason)
	}
	if a.Result < 0 {
		d += " -> " + unix.ErrnoName(unix.Errno(-a.Result))
	} else {
		d += fmt.Sprintf(" -> %d", a.Result)
	}
	return d
}

// completeness says whether a record's trail is complete, and (long) why not.
func completeness(r *event.CallRecord, long bool) string {
	switch {
	case r.Complete:
		return "yes"
	case long && r.IncompleteReason != "":
		return "no (" + Safe(r.IncompleteReason) + ")"
	}
	return "no"
}

func result(ret int64, errno string) string {
	if errno != "" {
		return Safe(errno)
	}
	return fmt.Sprint(ret)
}

func openFlags(f uint32) string {
	var parts []string
	switch f & 3 {
	case 0:
		parts = append(parts, "RDONLY")
	case 1:
		parts = append(parts, "WRONLY")
	case 2:
		parts = append(parts, "RDWR")
	}
	for _, fl := range []struct {
		bit  uint32
		name string
	}{{0x40, "CREAT"}, {0x200, "TRUNC"}, {0x400, "APPEND"}, {0x10000, "DIRECTORY"}, {0x80000, "CLOEXEC"}} {
		if f&fl.bit != 0 {
			parts = append(parts, fl.name)
		}
	}
	return strings.Join(parts, "|")
}

// quoteArgv prints an argv with Go quotes around the arguments that need them (which escape
// every unprintable character too), and the others through Safe.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = Safe(a)
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

func topSyscalls(m map[string]uint64, n int) string {
	type kv struct {
		k string
		v uint64
	}
	var s []kv
	for k, v := range m {
		s = append(s, kv{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].v > s[j].v || s[i].v == s[j].v && s[i].k < s[j].k })
	if len(s) > n {
		s = s[:n]
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprintf("%s=%d", Safe(x.k), x.v)
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// surfaceSummary is a record's surfaces on one line: isolation=enforced policy=audit!3 ...
// (!N: N violations attributed to the surface).
func surfaceSummary(ss []event.SurfaceState) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = Safe(s.Surface) + "=" + Safe(s.State)
		if s.Surface == event.SurfaceCredential && slices.Contains(s.Layers, event.LayerInject) {
			parts[i] += " (inject)" // the call's secrets never entered it
		}
		if s.Violated {
			parts[i] += fmt.Sprintf("!%d", s.Violations)
		}
	}
	return strings.Join(parts, " ")
}
