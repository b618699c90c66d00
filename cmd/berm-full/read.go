package main

import (
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
		fmt.Fprintln(os.Stderr, "usage: berm timeline [--json] [--all] [--kind K[,K]] [--pid P] [--source S] CALL_ID|CALL_KEY|TENANT/CALL_ID")
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
	call, evs, err := src.Timeline(id)
	if errors.Is(err, audit.ErrNoCall) {
		return fail("no call %q in %s", id, sourceName(*stateDir, *source))
	}
	if err != nil {
		return fail("%v", err)
	}
	evs = slices.DeleteFunc(evs, func(e event.Event) bool { return !*all && e.Phase == event.PhaseSetup || !filter.keep(&e) })
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
