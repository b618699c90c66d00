package plugin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/bermsec/berm/collector"
)

// A query type the datasource does not know is the request's mistake (400, naming the types
// there are), found before any statement reaches ClickHouse: no connection is needed for it.
func TestAnUnknownQueryTypeIsABadRequest(t *testing.T) {
	d := &Datasource{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b, _ := json.Marshal(map[string]any{"queryType": "no_such"})
	now := time.Unix(1_800_000_000, 0)
	q := backend.DataQuery{RefID: "A", JSON: b, Interval: 10 * time.Second, MaxDataPoints: 100,
		TimeRange: backend.TimeRange{From: now.Add(-time.Hour), To: now}}
	resp := d.query(context.Background(), nil, collector.Schema{Database: "berm", Dialect: collector.Legacy}, q)
	if resp.Status != backend.StatusBadRequest {
		t.Errorf("status %v, want %v (error %v)", resp.Status, backend.StatusBadRequest, resp.Error)
	}
	if resp.Error == nil || !strings.Contains(resp.Error.Error(), `query type "no_such" is not known: want one of `) ||
		!strings.Contains(resp.Error.Error(), "calls") {
		t.Errorf("error %v, want the unknown type and the known ones", resp.Error)
	}
}
