package collector

import (
	"fmt"

	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/collector/query"
)

var (
	_ audit.MatrixSource       = (*CHSource)(nil)
	_ audit.MatrixReasonSource = (*CHSource)(nil)
)

// MatrixRows groups the calls' surfaces in ClickHouse (query.Matrix): the rows
// audit.MatrixRows gives for the journal that was shipped.
func (s *CHSource) MatrixRows(f audit.Filter, surface string) ([]audit.MatrixRow, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	qf := query.Filter{Since: f.Since, Tenant: f.Tenant, Surface: surface}
	if f.Tool != "" {
		qf.Tools = []string{f.Tool}
	}
	q, err := s.Tables().Matrix(qf)
	if err != nil {
		return nil, fmt.Errorf("matrix query: %w", err)
	}
	rows, err := s.conn.Query(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("matrix query: %w", err)
	}
	defer rows.Close()
	var out []audit.MatrixRow
	for rows.Next() {
		var r audit.MatrixRow
		var violated uint8
		if err := rows.Scan(&r.Tool, &r.Surface, &r.State, &violated, &r.Calls, &r.Violations, &r.Inject); err != nil {
			return nil, fmt.Errorf("read matrix: %w", err)
		}
		r.Violated = violated != 0
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read matrix: %w", err)
	}
	return out, nil
}

// MatrixReasons groups the degraded surfaces' reasons in ClickHouse (query.MatrixReasons).
func (s *CHSource) MatrixReasons(f audit.Filter, surface string) ([]audit.MatrixReason, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	qf := query.Filter{Since: f.Since, Tenant: f.Tenant, Surface: surface}
	if f.Tool != "" {
		qf.Tools = []string{f.Tool}
	}
	q, err := s.Tables().MatrixReasons(qf)
	if err != nil {
		return nil, fmt.Errorf("matrix reasons query: %w", err)
	}
	rows, err := s.conn.Query(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("matrix reasons query: %w", err)
	}
	defer rows.Close()
	var out []audit.MatrixReason
	for rows.Next() {
		var r audit.MatrixReason
		if err := rows.Scan(&r.Tool, &r.Surface, &r.Reason, &r.Calls); err != nil {
			return nil, fmt.Errorf("read matrix reasons: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read matrix reasons: %w", err)
	}
	return out, nil
}
