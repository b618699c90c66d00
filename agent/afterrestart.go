package agent

import (
	"bytes"
	"fmt"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// StateDir is the node's state directory (the journal, the fingerprint key, the launchers'
// pending credential revokes).
func (a *Agent) StateDir() string { return a.cfg.StateDir }

// AppendAfterRestart journals events of a call whose launcher died before it ended (the revokes
// a restarted launcher ran for it): numbered after the last event of the call the journal
// holds, so that they follow its trail and keep (call, seq) unique. The call's ids come from
// start; nothing else of it is read or changed. It reads the whole journal once: it runs only
// at a launcher's start, and only for calls a crash left behind.
func (a *Agent) AppendAfterRestart(start event.CallStart, evs []event.Event) error {
	var last uint64
	key := []byte(`"` + start.CallKey + `"`)
	res, err := journal.Scan(a.jw.Dir(), journal.Position{}, func(r journal.Record) error {
		if r.Type != journal.TypeEvents || !bytes.Contains(r.Payload, key) {
			return nil
		}
		batch, err := journal.DecodeEvents(r.Payload)
		if err != nil {
			return fmt.Errorf("record at %s: %w", r.Pos, err)
		}
		for _, e := range batch {
			if e.CallKey == start.CallKey && e.Seq > last {
				last = e.Seq
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("find the last event of call %s: %w", start.CallKey, err)
	}
	for _, p := range res.Problems {
		a.log.Warn("journal record skipped", "segment", p.Pos.Segment, "offset", p.Pos.Offset, "reason", p.Reason)
	}
	out := make([]event.Event, len(evs))
	for i, ev := range evs {
		last++
		ev.Seq = last
		ev.CallID, ev.CallKey, ev.Tool, ev.Tenant = start.CallID, start.CallKey, start.Tool, start.Tenant
		out[i] = ev
	}
	if err := a.jw.AppendEvents(out); err != nil {
		return fmt.Errorf("journal events of call %s after a restart: %w", start.CallKey, err)
	}
	return nil
}
