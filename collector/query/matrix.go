package query

// Matrix groups the finished calls f selects by tool, surface, state and whether the surface
// was violated: columns tool, surface, state (String), violated (UInt8), calls, violations
// and inject (UInt64: the calls whose surface had the inject layer, berm's injecting egress),
// ordered by tool, surface, state, violated. One row per call and
// surface (ARRAY JOIN of the record's parallel surface arrays; a record written before
// surfaces existed has none and is not counted), each call once however often the table
// holds it. collector/audit.FoldMatrix turns the rows into the tools x surfaces matrix; the
// journal gives the same rows (audit.MatrixRows). f.Surface keeps that surface's rows only.
func (t Tables) Matrix(f Filter) (Query, error) { return t.matrix(f, false) }

// MatrixWithReasons is Matrix with an eighth column, reasons (String): the distinct reasons the
// rows' calls gave for the surface's state ("; "-joined, sorted), which say why a surface is
// degraded. A record written before surface_reasons existed gives none.
func (t Tables) MatrixWithReasons(f Filter) (Query, error) { return t.matrix(f, true) }

func (t Tables) matrix(f Filter, reasons bool) (Query, error) {
	name, err := t.table(tableCalls)
	if err != nil {
		return Query{}, err
	}
	surface := f.Surface
	f.Surface, f.State = "", "" // a matrix filter on the surface, not on the calls
	w, err := t.filter(tableCalls, f)
	if err != nil {
		return Query{}, err
	}
	args := w.args
	outer := ""
	if surface != "" {
		outer = " WHERE surface = ?"
		args = append(args, surface)
	}
	cols, inner, join := "", "", ""
	if reasons {
		// surface_reasons resized to surfaces: an older record's empty array gives '' each, not
		// an ARRAY JOIN size mismatch (arrayResize: ClickHouse 18.16 has it; its lambdas cannot
		// read a column)
		cols = ", arrayStringConcat(arraySort(groupUniqArrayIf(reason, reason != '')), '; ') AS reasons"
		inner = ", arrayResize(surface_reasons, length(surfaces), '') AS reasons_of"
		join = ", reasons_of AS reason"
	}
	return Query{
		"SELECT tool, surface, state, v > 0 AS violated, count() AS calls, sum(v) AS violations, " + injectCalls + " AS inject" + cols + " FROM (" +
			"SELECT tenant, tool, start_time, call_id, surfaces, surface_states, surface_violations, " + layersOf + " AS layers_of" + inner + " FROM " + name + " WHERE " + w.String() + " " + dedup +
			") ARRAY JOIN surfaces AS surface, surface_states AS state, surface_violations AS v, layers_of AS layers" + join + outer +
			" GROUP BY tool, surface, state, violated ORDER BY tool, surface, state, violated",
		args,
	}, nil
}

// MatrixReasons groups the degraded surfaces of the finished calls f selects by tool, surface
// and reason (the record's surface_reasons): columns tool, surface, reason (String) and calls
// (UInt64), ordered by tool, surface, reason; each call once however often the table holds
// it. f.Surface keeps that surface's rows only. berm matrix footnotes its degraded cells
// with them (audit.MatrixReasons gives the same from the journal).
func (t Tables) MatrixReasons(f Filter) (Query, error) {
	name, err := t.table(tableCalls)
	if err != nil {
		return Query{}, err
	}
	surface := f.Surface
	f.Surface, f.State = "", ""
	w, err := t.filter(tableCalls, f)
	if err != nil {
		return Query{}, err
	}
	args := w.args
	outer := " WHERE state = 'degraded'"
	if surface != "" {
		outer += " AND surface = ?"
		args = append(args, surface)
	}
	return Query{
		"SELECT tool, surface, reason, count() AS calls FROM (" +
			"SELECT tenant, tool, start_time, call_id, surfaces, surface_states, arrayResize(surface_reasons, length(surfaces), '') AS reasons_of FROM " + name + " WHERE " + w.String() + " " + dedup +
			") ARRAY JOIN surfaces AS surface, surface_states AS state, reasons_of AS reason" + outer +
			" GROUP BY tool, surface, reason ORDER BY tool, surface, reason",
		args,
	}, nil
}
