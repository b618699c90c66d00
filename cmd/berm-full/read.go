package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// openSource opens --source: the local journal by default.
func openSource(stateDir, source string) (audit.Source, func(), error) {
	if viaBermd(stateDir, source) {
		return bermdSource{socket: bermdSocket()}, func() {}, nil
	}
	if source == "" || source == "journal" {
		return audit.Journal{Dir: filepath.Join(stateDir, "journal")}, func() {}, nil
	}
	if open, ok := sourceOpeners[schemeOf(source)]; ok {
		return open(source)
	}
	return nil, nil, fmt.Errorf("--source: expected 'journal' or clickhouse://HOST:PORT/DB, got %q", source)
}

// sourceOpeners are registered by the files of later capabilities (ClickHouse).
var sourceOpeners = map[string]func(string) (audit.Source, func(), error){}

func schemeOf(s string) string {
	for i := 0; i+3 <= len(s); i++ {
		if s[i:i+3] == "://" {
			return s[:i]
		}
	}
	return ""
}

// parseSince reads --since: a duration ago (1h) or an RFC 3339 time; "" is no bound.
func parseSince(since string) (time.Time, error) {
	if since == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(since); err == nil {
		return time.Now().Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, since); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since: expected a duration like 1h or an RFC 3339 time, got %q", since)
}

// callFlags are what berm calls and berm matrix share: where to read, and which calls.
type callFlags struct {
	stateDir, source, tool, tenant, since *string
	asJSON                                *bool
}

// addCallFlags defines the shared flags on fs; since is --since's default ("" for no bound).
func addCallFlags(fs *flag.FlagSet, since, sinceHelp string) callFlags {
	return callFlags{
		stateDir: fs.String("state-dir", "/var/lib/berm", "state directory (journal)"),
		source:   fs.String("source", "", "read from: journal (default) or clickhouse://HOST:PORT/DB"),
		tool:     fs.String("tool", "", "only this tool"),
		tenant:   fs.String("tenant", "", "only this tenant"),
		since:    fs.String("since", since, sinceHelp),
		asJSON:   fs.Bool("json", false, "JSON output"),
	}
}

// open reads the filter the flags give and opens the source; the func closes it.
func (c callFlags) open() (audit.Filter, audit.Source, func(), error) {
	f := audit.Filter{Tool: *c.tool, Tenant: *c.tenant}
	var err error
	if f.Since, err = parseSince(*c.since); err != nil {
		return f, nil, nil, err
	}
	src, closeSrc, err := openSource(*c.stateDir, *c.source)
	return f, src, closeSrc, err
}

func cmdCalls(args []string) int {
	fs := flag.NewFlagSet("calls", flag.ContinueOnError)
	cf := addCallFlags(fs, "", "only calls started since: a duration ago (1h) or an RFC 3339 time")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	f, src, closeSrc, err := cf.open()
	if err != nil {
		return fail("%v", err)
	}
	defer closeSrc()
	calls, err := src.Calls(f)
	if err != nil {
		return fail("%v", err)
	}
	if *cf.asJSON {
		err = audit.PrintCallsJSON(os.Stdout, calls)
	} else {
		err = audit.PrintCalls(os.Stdout, calls)
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

func cmdTimeline(args []string) int {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	stateDir := fs.String("state-dir", "/var/lib/berm", "state directory (journal)")
	source := fs.String("source", "", "read from: journal (default) or clickhouse://HOST:PORT/DB")
	asJSON := fs.Bool("json", false, "JSON output")
	all := fs.Bool("all", false, "also show berm's own sandbox set-up (events of phase setup)")
	kinds := fs.String("kind", "", "only events of these kinds, K[,K] (exec, open, syscall, denial, alert, ...)")
	pid := fs.String("pid", "", "only events of this process (host pid)")
	follow := fs.Bool("follow", false, "print the events of a running call as they come, until it ends (with --json: one event a line, then the call with its record)")
	// Flags may follow the call id.
	var id string
	rest := args
	for {
		if code, done := parseFlags(fs, rest); done {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		if id != "" {
			return fail("timeline takes one call id, got %q and %q", id, fs.Arg(0))
		}
		id, rest = fs.Arg(0), fs.Args()[1:]
	}
	if id == "" {
		fmt.Fprintln(os.Stderr, "usage: berm timeline [--json] [--all] [--follow] [--kind K[,K]] [--pid P] [--source S] CALL_ID|CALL_KEY|TENANT/CALL_ID")
		return 2
	}
	filter, err := parseTimelineFilter(*kinds, *pid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm timeline: %v\n", err)
		return 2
	}
	src, closeSrc, err := openSource(*stateDir, *source)
	if err != nil {
		return fail("%v", err)
	}
	defer closeSrc()
	keep := func(e *event.Event) bool { return (*all || e.Phase != event.PhaseSetup) && filter.keep(e) }
	if *follow {
		return followTimeline(src, id, keep, *asJSON, sourceName(*stateDir, *source))
	}
	call, evs, err := src.Timeline(id)
	if errors.Is(err, audit.ErrNoCall) {
		return fail("no call %q in %s", id, sourceName(*stateDir, *source))
	}
	if err != nil {
		return fail("%v", err)
	}
	evs = slices.DeleteFunc(evs, func(e event.Event) bool { return !keep(&e) })
	if *asJSON {
		err = audit.PrintTimelineJSON(os.Stdout, call, evs)
	} else {
		err = audit.PrintTimeline(os.Stdout, call, evs)
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

// followPoll is how often berm timeline --follow reads the trail of a running call again.
const followPoll = 200 * time.Millisecond

// followTimeline prints a call's events as its trail gets them, until the call has its
// record. A call whose writer died has none: it is followed until interrupted.
func followTimeline(src audit.Source, id string, keep func(*event.Event) bool, asJSON bool, name string) int {
	var last uint64
	header := false
	enc := json.NewEncoder(os.Stdout)
	for {
		call, evs, err := src.Timeline(id)
		if errors.Is(err, audit.ErrNoCall) {
			return fail("no call %q in %s", id, name)
		}
		if err != nil {
			return fail("%v", err)
		}
		if !header && !asJSON {
			// The start only: the end is printed when it comes.
			start := *call
			start.Record = nil
			audit.PrintTimelineHeader(os.Stdout, &start)
		}
		var fresh []event.Event
		for _, e := range evs {
			if e.Seq > last {
				last = e.Seq
				if keep(&e) {
					fresh = append(fresh, e)
				}
			}
		}
		if asJSON {
			for i := range fresh {
				if err := enc.Encode(&fresh[i]); err != nil {
					return fail("%v", err)
				}
			}
		} else if err := audit.PrintEvents(os.Stdout, call.Start.Start, fresh, !header); err != nil {
			return fail("%v", err)
		}
		header = true
		if call.Record != nil {
			if asJSON {
				if err := enc.Encode(audit.TimelineJSON{Call: call, Events: []event.Event{}}); err != nil {
					return fail("%v", err)
				}
			} else {
				fmt.Println()
				audit.PrintTimelineHeader(os.Stdout, call)
			}
			return 0
		}
		time.Sleep(followPoll)
	}
}

// bermdSocket is bermd's socket for the read requests: $BERM_SOCKET, else the default.
func bermdSocket() string {
	if s := os.Getenv("BERM_SOCKET"); s != "" {
		return s
	}
	return callproto.DefaultSocket
}

func sourceName(stateDir, source string) string {
	if viaBermd(stateDir, source) {
		return "bermd's trail"
	}
	if source == "" || source == "journal" {
		return filepath.Join(stateDir, "journal")
	}
	return source
}
