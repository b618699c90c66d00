package plugin

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/bermsec/berm/collector/query"
)

// run builds a query type's statements, runs them and shapes their rows into frames.
func run(ctx context.Context, conn driver.Conn, queryType string, p query.Params) (data.Frames, error) {
	stmts, err := query.Build(queryType, p)
	if err != nil {
		return nil, err
	}
	var raw []*data.Frame
	for _, st := range stmts {
		f, err := rowsFrame(ctx, conn, st)
		if err != nil {
			return nil, err
		}
		f.Meta = &data.FrameMeta{ExecutedQueryString: st.SQL}
		if f.Rows() >= limit(p) && (st.Shape == query.Table || st.Shape == query.Logs || st.Shape == query.Tree) {
			// a flood must not pass for all there is
			f.AppendNotices(data.Notice{Severity: data.NoticeSeverityWarning,
				Text: fmt.Sprintf("only the first %d rows: narrow the range or the filters, or raise the query's limit (up to 10000)", limit(p))})
		}
		raw = append(raw, f)
	}
	switch stmts[0].Shape {
	case query.Series:
		return series(raw[0])
	case query.Matrix:
		return data.Frames{matrix(stmts[0].Name, raw...)}, nil
	case query.Summary:
		return data.Frames{summary(raw[0], matrix("surfaces", raw[1:]...))}, nil
	case query.Logs:
		return data.Frames{logs(raw[0])}, nil
	case query.Tree:
		return tree(raw[0]), nil
	}
	return raw, nil
}

// limit is the row limit a query runs with (query.Params.Check's default when unset).
func limit(p query.Params) int {
	if p.Limit <= 0 || p.Limit > 10000 {
		return 1000
	}
	return p.Limit
}

// nsSuffix marks a column of nanoseconds since the epoch, made a time field.
const nsSuffix = "_unix_ns"

// rowsFrame reads every row of a statement into a frame, column by column, typed as the
// server types them (arrays and other types frames lack become text).
func rowsFrame(ctx context.Context, conn driver.Conn, st query.Statement) (*data.Frame, error) {
	rows, err := conn.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", st.Name, err)
	}
	defer rows.Close()
	cols := rows.ColumnTypes()
	ptrs := make([]any, len(cols))
	fields := make([]*data.Field, len(cols))
	for i, c := range cols {
		ptrs[i] = reflect.New(c.ScanType()).Interface()
		sample := reflect.ValueOf(ptrs[i]).Elem().Interface()
		ft := data.FieldTypeFor(sample)
		name := c.Name()
		switch {
		case strings.HasSuffix(name, nsSuffix):
			ft, name = data.FieldTypeTime, strings.TrimSuffix(name, nsSuffix)
		case ft == data.FieldTypeUnknown:
			ft = data.FieldTypeString
		}
		fields[i] = data.NewFieldFromFieldType(ft, 0)
		fields[i].Name = name
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("%s: scan: %w", st.Name, err)
		}
		for i, p := range ptrs {
			v := reflect.ValueOf(p).Elem().Interface()
			switch fields[i].Type() {
			case data.FieldTypeTime:
				if n, ok := v.(uint64); ok {
					v = time.Unix(0, int64(n)).UTC()
				}
			case data.FieldTypeString:
				if _, ok := v.(string); !ok {
					v = text(v)
				}
			}
			fields[i].Append(v)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", st.Name, err)
	}
	return data.NewFrame(st.Name, fields...), nil
}

func text(v any) string {
	if ss, ok := v.([]string); ok {
		var keep []string
		for _, s := range ss {
			if s != "" {
				keep = append(keep, s)
			}
		}
		return strings.Join(keep, ", ")
	}
	return fmt.Sprint(v)
}

// series makes a long frame (time, labels..., values...) wide: a field per label value.
func series(long *data.Frame) (data.Frames, error) {
	hasLabel := false
	for _, f := range long.Fields {
		if f.Type() == data.FieldTypeString {
			hasLabel = true
		}
	}
	if !hasLabel || long.Rows() == 0 {
		return data.Frames{long}, nil
	}
	wide, err := data.LongToWide(long, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", long.Name, err)
	}
	wide.Name, wide.Meta = long.Name, long.Meta
	// name each series by its label alone, so the legend says "policy", not "violations policy"
	for _, f := range wide.Fields {
		if len(f.Labels) == 1 {
			for _, v := range f.Labels {
				f.Config = &data.FieldConfig{DisplayNameFromDS: v}
			}
		}
	}
	return data.Frames{wide}, nil
}
