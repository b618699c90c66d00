package collector

import (
	"strings"

	"github.com/bermsec/berm/agent/event"
)

// scanEvents turns an events record into rows in one pass over its JSON, without decoding the
// kind-specific parts into values and encoding them again for the detail column: the parts'
// text is copied as it stands, which is what encoding them again would give back (the
// scanner takes nothing else). Every string column is a substring of the record: no copies.
// The rows are appended to rows (empty, with room to reuse). ok is false when the record is
// not in the writer's form; decodeEvents then decodes it the general way. This is the
// collector's hot path: go-json's decode and re-encode took most of its CPU and garbage.
func scanEvents(s string, rows []eventRow) (_ []eventRow, ok bool) {
	sc := scanner{s: s}
	var (
		e event.Event
		p scanParts
	)
	if rows == nil {
		rows = make([]eventRow, 0, len(s)/256+8) // events of the writer are rarely shorter
	}
	size := 0
	sc.expect('[')
	if sc.peek() == ']' {
		sc.i++
	} else {
		for {
			r := sc.event(&e, &p)
			if r.detail != "" {
				size += len(r.detail) + 1 // the parts with their leading comma, which { replaces, and }
			}
			rows = append(rows, r)
			if sc.peek() != ',' {
				break
			}
			sc.i++
		}
		sc.expect(']')
	}
	if sc.bad || sc.i != len(s) {
		return rows[:0], false
	}
	// One buffer for the record's details: the rows' detail strings are slices of it.
	var b strings.Builder
	b.Grow(size)
	for k := range rows {
		parts := rows[k].detail
		if parts == "" {
			rows[k].detail = "{}"
			continue
		}
		at := b.Len()
		b.WriteByte('{')
		b.WriteString(parts[1:])
		b.WriteByte('}')
		rows[k].detail = b.String()[at:]
	}
	return rows, true
}

// scanParts holds the parts of the event being scanned (all but the alert, which its alert
// row keeps), so that scanning allocates nothing per event.
type scanParts struct {
	exec    event.Exec
	fork    event.Fork
	exit    event.Exit
	open    event.Open
	connect event.Connect
	syscall event.Syscall
	denial  event.Denial
	drop    event.Drop
	limit   event.Limit
}

// event reads one event into e; the row's detail is, for now, the text of its parts with the
// comma before them (scanEvents wraps it).
func (sc *scanner) event(e *event.Event, p *scanParts) eventRow {
	*e = event.Event{}
	sc.need(`{"call_id":`)
	e.CallID = sc.str()
	sc.need(`,"seq":`)
	e.Seq = sc.uint64()
	sc.need(`,"time":`)
	e.Time = sc.time()
	sc.need(`,"kind":`)
	e.Kind = event.Kind(sc.str())
	if sc.has(`,"tool":`) {
		e.Tool = sc.str()
	}
	if sc.has(`,"tenant":`) {
		e.Tenant = sc.str()
	}
	if sc.has(`,"pid":`) {
		e.PID = sc.uint32()
	}
	if sc.has(`,"tid":`) {
		e.TID = sc.uint32()
	}
	if sc.has(`,"ppid":`) {
		e.PPID = sc.uint32()
	}
	sc.need(`,"uid":`)
	e.UID = sc.uint32()
	if sc.has(`,"comm":`) {
		e.Comm = sc.str()
	}
	if sc.has(`,"exe":`) {
		e.Exe = sc.str()
	}
	if sc.has(`,"parent_exe":`) {
		e.ParentExe = sc.str()
	}
	// The parts are the event's last members, in this order; uid always comes before them.
	from := sc.i
	if sc.has(`,"exec":`) {
		e.Exec = &p.exec
		sc.exec(e.Exec)
	}
	if sc.has(`,"fork":`) {
		e.Fork = &p.fork
		sc.fork(e.Fork)
	}
	if sc.has(`,"exit":`) {
		e.Exit = &p.exit
		sc.exit(e.Exit)
	}
	if sc.has(`,"open":`) {
		e.Open = &p.open
		sc.open(e.Open)
	}
	if sc.has(`,"connect":`) {
		e.Connect = &p.connect
		sc.connect(e.Connect)
	}
	if sc.has(`,"syscall":`) {
		e.Syscall = &p.syscall
		sc.syscall(e.Syscall)
	}
	if sc.has(`,"denial":`) {
		e.Denial = &p.denial
		sc.denial(e.Denial)
	}
	if sc.has(`,"alert":`) {
		e.Alert = &event.Alert{}
		sc.alert(e.Alert)
	}
	if sc.has(`,"drop":`) {
		e.Drop = &p.drop
		sc.drop(e.Drop)
	}
	if sc.has(`,"limit":`) {
		e.Limit = &p.limit
		sc.limit(e.Limit)
	}
	to := sc.i
	sc.expect('}')
	if sc.bad {
		return eventRow{}
	}
	return rowOf(e, sc.s[from:to])
}

// The part readers below follow the structs in agent/event member by member: need for
// members always written, has for omitempty ones (present only when not empty). A member
// that is no column is still read, to check it is what the writer would have written.

// isTrue reads an omitempty bool, which is present only when true.
func (sc *scanner) isTrue() bool {
	sc.check(sc.literal("true"))
	return true
}

func (sc *scanner) exec(x *event.Exec) {
	*x = event.Exec{}
	sc.need(`{"filename":`)
	x.Filename = sc.str()
	sc.need(`,"argv":`) // not kept: no column needs it, and detail has its text
	if !sc.null() {
		sc.strs(false)
	}
	if sc.has(`,"truncated":`) {
		x.Truncated = sc.isTrue()
	}
	sc.need(`,"mode":`)
	x.Mode = sc.uint32()
	if sc.has(`,"setuid":`) {
		x.Setuid = sc.isTrue()
	}
	if sc.has(`,"deleted":`) {
		x.Deleted = sc.isTrue()
	}
	if sc.has(`,"exe_name":`) {
		x.ExeName = sc.nonEmpty()
	}
	sc.need(`,"euid":`)
	x.EUID = sc.uint32()
	sc.expect('}')
}

func (sc *scanner) fork(x *event.Fork) {
	sc.need(`{"child_pid":`)
	x.ChildPID = sc.uint32()
	sc.expect('}')
}

func (sc *scanner) exit(x *event.Exit) {
	*x = event.Exit{}
	sc.need(`{"code":`)
	x.Code = sc.int()
	if sc.has(`,"signal":`) {
		x.Signal = sc.int()
		sc.check(x.Signal != 0)
	}
	sc.expect('}')
}

func (sc *scanner) open(x *event.Open) {
	*x = event.Open{}
	sc.need(`{"path":`)
	x.Path = sc.str()
	sc.need(`,"dirfd":`)
	x.Dirfd = sc.int32()
	sc.need(`,"flags":`)
	x.Flags = sc.uint32()
	if sc.has(`,"mode":`) {
		x.Mode = sc.uint32()
		sc.check(x.Mode != 0)
	}
	sc.need(`,"result":`)
	x.Result = sc.int64()
	if sc.has(`,"errno":`) {
		x.Errno = sc.nonEmpty()
	}
	sc.expect('}')
}

func (sc *scanner) connect(x *event.Connect) {
	*x = event.Connect{}
	sc.need(`{"family":`)
	x.Family = sc.str()
	sc.need(`,"addr":`)
	x.Addr = sc.str()
	if sc.has(`,"port":`) {
		x.Port = sc.uint16()
		sc.check(x.Port != 0)
	}
	sc.need(`,"result":`)
	x.Result = sc.int64()
	if sc.has(`,"errno":`) {
		x.Errno = sc.nonEmpty()
	}
	sc.expect('}')
}

func (sc *scanner) syscall(x *event.Syscall) {
	*x = event.Syscall{}
	sc.need(`{"nr":`)
	x.Nr = sc.uint32()
	sc.need(`,"name":`)
	x.Name = sc.str()
	sc.need(`,"args":`)
	sc.expect('[')
	for k := range x.Args {
		if k > 0 {
			sc.expect(',')
		}
		x.Args[k] = sc.uint64()
	}
	sc.expect(']')
	if sc.has(`,"path":`) {
		x.Path = sc.nonEmpty()
	}
	if sc.has(`,"path2":`) {
		x.Path2 = sc.nonEmpty()
	}
	sc.need(`,"result":`)
	x.Result = sc.int64()
	if sc.has(`,"errno":`) {
		x.Errno = sc.nonEmpty()
	}
	sc.expect('}')
}

func (sc *scanner) denial(x *event.Denial) {
	*x = event.Denial{}
	sc.need(`{"layer":`)
	x.Layer = sc.str()
	sc.need(`,"surface":`)
	x.Surface = sc.str()
	sc.need(`,"rule":`)
	x.Rule = sc.str()
	sc.need(`,"object":`)
	x.Object = sc.str()
	if sc.has(`,"audit":`) {
		x.Audit = sc.isTrue()
	}
	sc.expect('}')
}

func (sc *scanner) alert(x *event.Alert) {
	sc.need(`{"rule_id":`)
	x.RuleID = sc.str()
	sc.need(`,"title":`)
	x.Title = sc.str()
	sc.need(`,"severity":`)
	x.Severity = sc.str()
	sc.need(`,"surface":`)
	x.Surface = sc.str()
	if sc.has(`,"technique":`) {
		var n int
		x.Technique, n = sc.strs(true)
		sc.check(n > 0)
	}
	sc.need(`,"output":`)
	x.Output = sc.str()
	sc.need(`,"event_seq":`)
	x.EventSeq = sc.uint64()
	sc.expect('}')
}

func (sc *scanner) drop(x *event.Drop) {
	sc.need(`{"kernel":`)
	x.Kernel = sc.uint64()
	sc.need(`,"user":`)
	x.User = sc.uint64()
	sc.expect('}')
}

func (sc *scanner) limit(x *event.Limit) {
	*x = event.Limit{}
	sc.need(`{"resource":`)
	x.Resource = sc.str()
	sc.need(`,"limit":`)
	x.Limit = sc.int64()
	if sc.has(`,"detail":`) {
		x.Detail = sc.nonEmpty()
	}
	sc.expect('}')
}
