// Package plugin is berm-datasource, Grafana's backend for the ClickHouse tables the collector
// writes: it turns a panel's query type and filters into the SQL of collector/query (one
// source for both DDL dialects, 18.16 included) and its rows into frames.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/instancemgmt"

	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/collector/query"
)

// ID is the plugin's id, as plugin.json and Grafana's allow_loading_unsigned_plugins name it.
const ID = "berm-datasource"

// Settings are the datasource's configuration (jsonData, and the password in secureJsonData).
type Settings struct {
	DSN      string `json:"dsn"`      // clickhouse://host:9000/database
	Database string `json:"database"` // overrides the DSN's database when set
	// Tenant, when set, restricts every query of this datasource to one tenant: a Grafana
	// organisation given this datasource sees no other tenant's calls whatever its panels ask.
	Tenant   string `json:"tenant"`
	password string
}

// ParseSettings reads a datasource's settings.
func ParseSettings(s backend.DataSourceInstanceSettings) (Settings, error) {
	var st Settings
	if len(s.JSONData) > 0 {
		if err := json.Unmarshal(s.JSONData, &st); err != nil {
			return st, fmt.Errorf("berm datasource settings: %w", err)
		}
	}
	if st.DSN == "" {
		st.DSN = s.URL
	}
	st.password = s.DecryptedSecureJSONData["password"]
	if st.DSN == "" {
		return st, errors.New("berm datasource settings: no ClickHouse DSN (jsonData.dsn, e.g. clickhouse://127.0.0.1:9000/berm)")
	}
	return st, nil
}

// dsn is the DSN with the database and password applied.
func (s Settings) dsn() (string, error) {
	u, err := url.Parse(s.DSN)
	if err != nil {
		return "", fmt.Errorf("berm datasource dsn: %w", err)
	}
	if s.Database != "" {
		u.Path = "/" + s.Database
	}
	if s.password != "" {
		user := "default"
		if u.User != nil {
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, s.password)
	}
	return u.String(), nil
}

// Datasource is one configured berm datasource. It connects on first use, so that a
// ClickHouse that is down is reported by the health check and the panels, not by Grafana
// failing to create the datasource.
type Datasource struct {
	settings Settings
	log      *slog.Logger

	mu     sync.Mutex
	conn   driver.Conn
	schema collector.Schema
}

var (
	_ backend.QueryDataHandler      = (*Datasource)(nil)
	_ backend.CheckHealthHandler    = (*Datasource)(nil)
	_ instancemgmt.InstanceDisposer = (*Datasource)(nil)
)

// NewDatasource is the SDK's instance factory.
func NewDatasource(_ context.Context, s backend.DataSourceInstanceSettings) (instancemgmt.Instance, error) {
	st, err := ParseSettings(s)
	if err != nil {
		return nil, err
	}
	return &Datasource{settings: st, log: slog.Default().With("datasource", s.UID)}, nil
}

// Dispose closes the connection when Grafana replaces the instance (settings changed).
func (d *Datasource) Dispose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}

func (d *Datasource) connect(ctx context.Context) (driver.Conn, collector.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		return d.conn, d.schema, nil
	}
	dsn, err := d.settings.dsn()
	if err != nil {
		return nil, collector.Schema{}, err
	}
	conn, schema, err := collector.Open(ctx, dsn)
	if err != nil {
		return nil, collector.Schema{}, err
	}
	d.conn, d.schema = conn, schema
	return conn, schema, nil
}

// CheckHealth checks the connection and that the tables are at the schema version this build
// reads.
func (d *Datasource) CheckHealth(ctx context.Context, _ *backend.CheckHealthRequest) (*backend.CheckHealthResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, _, err := d.connect(ctx)
	if err != nil {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: err.Error()}, nil
	}
	// read the version again: the collector migrates while the datasource lives
	s, err := collector.ReadSchema(ctx, conn, d.schema.Database)
	if err != nil {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: err.Error()}, nil
	}
	if s.Version < s.Latest {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError,
			Message: fmt.Sprintf("berm schema in %s is at version %d, this plugin reads version %d: run the collector of this release (it migrates at start) or berm-collector --migrate", s.Database, s.Version, s.Latest)}, nil
	}
	msg := fmt.Sprintf("berm schema version %d (%s dialect) in database %s", s.Version, s.Dialect, s.Database)
	if s.Version > s.Latest {
		msg += fmt.Sprintf("; newer than this plugin's %d: upgrade the plugin", s.Latest)
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: msg}, nil
	}
	if d.settings.Tenant != "" {
		msg += "; restricted to tenant " + d.settings.Tenant
	}
	return &backend.CheckHealthResult{Status: backend.HealthStatusOk, Message: msg}, nil
}

// QueryData runs each query of the request; one query's error is its own response's error.
func (d *Datasource) QueryData(ctx context.Context, req *backend.QueryDataRequest) (*backend.QueryDataResponse, error) {
	resp := backend.NewQueryDataResponse()
	conn, schema, err := d.connect(ctx)
	for _, q := range req.Queries {
		if err != nil {
			resp.Responses[q.RefID] = backend.ErrDataResponse(backend.StatusBadGateway, err.Error())
			continue
		}
		resp.Responses[q.RefID] = d.query(ctx, conn, schema, q)
	}
	return resp, nil
}

func (d *Datasource) query(ctx context.Context, conn driver.Conn, schema collector.Schema, q backend.DataQuery) backend.DataResponse {
	m, err := ParseModel(q)
	if err != nil {
		return backend.ErrDataResponse(backend.StatusBadRequest, err.Error())
	}
	p, err := m.Params(q, schema, d.settings.Tenant)
	if err != nil {
		return backend.ErrDataResponse(backend.StatusBadRequest, err.Error())
	}
	frames, err := run(ctx, conn, m.QueryType, p)
	if err != nil {
		d.log.Warn("query failed", "type", m.QueryType, "ref", q.RefID, "err", err)
		if _, unknown := errors.AsType[*query.UnknownTypeError](err); unknown {
			return backend.ErrDataResponse(backend.StatusBadRequest, err.Error())
		}
		return backend.ErrDataResponse(backend.StatusInternal, err.Error())
	}
	for _, f := range frames {
		f.RefID = q.RefID
	}
	return backend.DataResponse{Frames: frames}
}
