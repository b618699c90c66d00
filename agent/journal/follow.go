package journal

import (
	"context"
	"time"
)

// Follow calls fn for every record from `from` on, in order, and then for every record appended
// after, reading the journal again every poll, until ctx ends (it then returns nil) or fn or a
// read fails. It is the loop of the journal's followers (the alert webhook, the OTLP exporter):
// they keep their own cursor, from the records' positions, and resume from it.
func Follow(ctx context.Context, dir string, from Position, poll time.Duration, fn func(Record) error) error {
	pos := from
	for {
		res, err := Scan(dir, pos, fn)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		pos = res.End
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}
