package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/collector/tetragon"
)

func init() { extraCommands["events"] = cmdEvents }

const eventsUsage = `usage: berm events [--since DUR] [--follow] [--call ID] [--tenant N] [--tool T] [--host N] [--kind K[,K]]
                   [--all] [--format json|tetragon] [--source S] [--state-dir DIR]

One event per line, as JSON (the schema's field names: agent/event/FIELDS.md), or as Tetragon's
GetEventsResponse (--format tetragon: collector/tetragon/README.md has the mapping).
`

func cmdEvents(args []string) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), eventsUsage); fs.PrintDefaults() }
	stateDir := fs.String("state-dir", "/var/lib/berm", "state directory (journal)")
	source := fs.String("source", "", "read from: journal (default) or clickhouse://HOST:PORT/DB")
	since := fs.String("since", "", "only events since: a duration ago (1h) or an RFC 3339 time")
	follow := fs.Bool("follow", false, "after what is stored, wait for new events (the journal; through bermd for a caller that is not root)")
	call := fs.String("call", "", "only this call: its call key, its id, or TENANT/ID")
	tenant := fs.String("tenant", "", "only this tenant's calls")
	tool := fs.String("tool", "", "only this tool's calls")
	kinds := fs.String("kind", "", "only these kinds, comma-separated: "+kindList())
	all := fs.Bool("all", false, "also berm's own sandbox set-up (events of phase setup)")
	format := fs.String("format", "json", "json or tetragon")
	node := fs.String("node", "", "the node name written in tetragon format (default: this host's name)")
	host := fs.String("host", "", "only the calls that ran on this node (bermd --node; a fleet's ClickHouse holds every node's)")
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(os.Stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return fail("events takes no arguments, got %q (a call is --call ID)", fs.Arg(0))
	}
	f := audit.EventFilter{Call: *call, Tenant: *tenant, Tool: *tool, Node: *host, Setup: *all}
	var err error
	if f.Since, err = parseSince(*since); err != nil {
		return fail("%v", err)
	}
	if f.Kinds, err = parseKinds(*kinds); err != nil {
		return fail("%v", err)
	}
	src, closeSrc, err := openSource(*stateDir, *source)
	if err != nil {
		return fail("%v", err)
	}
	defer closeSrc()
	es, ok := src.(audit.EventSource)
	if !ok {
		return fail("--source %s cannot stream events", *source)
	}
	var write func(*event.Event) error
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	var conv *tetragon.Converter
	switch *format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false)
		write = func(e *event.Event) error { return enc.Encode(e) }
	case "tetragon":
		name := *node
		if name == "" {
			name, _ = os.Hostname()
		}
		conv = tetragon.New(name)
		opts := protojson.MarshalOptions{UseProtoNames: true}
		write = func(e *event.Event) error {
			r := conv.Convert(e)
			if r == nil {
				return nil
			}
			b, err := opts.Marshal(r)
			if err != nil {
				return fmt.Errorf("tetragon event of %s: %w", e.ID(), err)
			}
			out.Write(b)
			return out.WriteByte('\n')
		}
	default:
		return fail("--format: expected json or tetragon, got %q", *format)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = es.Events(ctx, f, *follow, func(e event.Event) error {
		if err := write(&e); err != nil {
			return err
		}
		// A follower's reader sees each event as it comes; a one-off read is written in blocks.
		if *follow {
			return out.Flush()
		}
		return nil
	})
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return fail("%v", err)
	}
	if conv != nil && len(conv.Unshaped) > 0 {
		fmt.Fprintf(os.Stderr, "berm: events: %s have no Tetragon shape and were not written (--format json has them)\n", countList(conv.Unshaped))
	}
	return 0
}

func kindList() string {
	names := make([]string, 0, len(event.Kinds))
	for _, k := range event.Kinds {
		names = append(names, string(k))
	}
	return strings.Join(names, ",")
}

// parseKinds reads --kind: names from the schema's kinds, comma-separated.
func parseKinds(s string) ([]event.Kind, error) {
	if s == "" {
		return nil, nil
	}
	var out []event.Kind
	for _, name := range strings.Split(s, ",") {
		k := event.Kind(strings.TrimSpace(name))
		if !slices.Contains(event.Kinds, k) {
			return nil, fmt.Errorf("--kind: unknown kind %q (expected %s)", name, kindList())
		}
		out = append(out, k)
	}
	return out, nil
}

func countList(m map[event.Kind]int) string {
	parts := make([]string, 0, len(m))
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
