package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bermsec/berm/agent/event"
)

// timelineFilter is berm timeline's --kind and --pid: which events to print.
type timelineFilter struct {
	kinds []event.Kind // none: every kind
	pid   uint32       // 0: every process
}

// parseTimelineFilter reads --kind K[,K] (event kinds) and --pid P.
func parseTimelineFilter(kinds, pid string) (timelineFilter, error) {
	var f timelineFilter
	for _, k := range strings.Split(kinds, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(event.Kinds, event.Kind(k)) {
			names := make([]string, len(event.Kinds))
			for i, n := range event.Kinds {
				names[i] = string(n)
			}
			return f, fmt.Errorf("--kind: unknown kind %q (kinds: %s)", k, strings.Join(names, ", "))
		}
		f.kinds = append(f.kinds, event.Kind(k))
	}
	if pid != "" {
		n, err := strconv.ParseUint(pid, 10, 32)
		if err != nil || n == 0 {
			return f, fmt.Errorf("--pid: expected a process id, got %q", pid)
		}
		f.pid = uint32(n)
	}
	return f, nil
}

// keep says whether an event passes the filter.
func (f timelineFilter) keep(e *event.Event) bool {
	if len(f.kinds) > 0 && !slices.Contains(f.kinds, e.Kind) {
		return false
	}
	return f.pid == 0 || e.PID == f.pid
}
