// Package collector ships the local journal to ClickHouse over the native protocol, and reads
// calls and timelines back from there (CHSource) for `berm calls` and `berm timeline`.
//
// Delivery is at least once from the journal's side and exactly once as queries see it: the
// cursor (one per journal and destination) moves only after ClickHouse acknowledged a batch;
// before each insert the batch's end is recorded as in flight, and a batch that may have
// reached ClickHouse already (the collector died, or an insert failed half way) is shipped
// again without the rows ClickHouse has (rows are keyed by call id and sequence number).
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/journal"
)

// Config configures a collector. Zero values get the defaults noted.
type Config struct {
	StateDir string // the agent's state dir; the journal is <StateDir>/journal
	DSN      string // clickhouse://host:9000/database

	BatchRows     int           // rows per insert, 50 000
	BatchInterval time.Duration // longest a row waits for its batch to fill, 1 s
	// MaxBacklogBytes is the unshipped journal size past which the collector warns and sets
	// berm_collector_backlog_over_limit. Nothing is deleted: the journal is the only copy of
	// unshipped events, and the agent's own journal limits decide what is kept. 1 GiB; <0: none.
	MaxBacklogBytes int64
	Retention       time.Duration // TTL of the tables on servers that have TTL; 0: keep forever
	// Cluster, when set, makes the collector write through Distributed tables over this
	// cluster (sharded by call id); see README.md. The node it connects to gets the tables.
	Cluster string

	MaxBackoff time.Duration // longest wait between retries, 10 s

	Registry prometheus.Registerer // where the metrics go; nil: a private registry
	Logger   *slog.Logger          // nil: slog.Default()
}

func (c *Config) defaults() {
	if c.BatchRows <= 0 {
		c.BatchRows = 50000
	}
	if c.BatchInterval <= 0 {
		c.BatchInterval = time.Second
	}
	if c.MaxBacklogBytes == 0 {
		c.MaxBacklogBytes = 1 << 30
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Collector ships one journal to one ClickHouse destination.
type Collector struct {
	cfg     Config
	dir     string
	opts    *clickhouse.Options
	db      string
	log     *slog.Logger
	m       *metrics
	cur     *cursor
	warned  map[journal.Position]bool
	overLim bool
	free    chan *batch // shipped batches, for reuse
	workers int         // decoding goroutines

	mu     sync.Mutex // guards conn and schema
	conn   driver.Conn
	schema SchemaOptions
}

// New checks the configuration and takes the cursor's lock. It does not connect: Run keeps
// trying until ClickHouse answers, RunOnce fails if it does not.
func New(cfg Config) (*Collector, error) {
	cfg.defaults()
	if cfg.StateDir == "" {
		return nil, errors.New("collector: no state dir")
	}
	opts, db, err := parseDSN(cfg.DSN)
	if err != nil {
		return nil, err
	}
	if cfg.Cluster != "" && !identifier.MatchString(cfg.Cluster) {
		return nil, fmt.Errorf("cluster name %q is not a plain identifier", cfg.Cluster)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("register collector metrics: %w", err)
	}
	cur, err := openCursor(cfg.StateDir, cfg.DSN)
	if err != nil {
		return nil, err
	}
	c := &Collector{
		cfg: cfg, dir: filepath.Join(cfg.StateDir, "journal"), opts: opts, db: db,
		log: cfg.Logger.With("destination", redactDSN(cfg.DSN)), m: m, cur: cur,
		warned: map[journal.Position]bool{}, free: make(chan *batch, 3),
		workers: runtime.GOMAXPROCS(0),
	}
	if cfg.MaxBacklogBytes > 0 {
		m.backlogLimit.Set(float64(cfg.MaxBacklogBytes))
	}
	c.updateBacklog()
	return c, nil
}

// Close releases the connection and the cursor's lock.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	if c.conn != nil {
		errs = append(errs, c.conn.Close())
		c.conn = nil
	}
	errs = append(errs, c.cur.close())
	return errors.Join(errs...)
}

// connect dials, picks the dialect and applies the migrations, once per connection.
func (c *Collector) connect(ctx context.Context) (driver.Conn, SchemaOptions, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, c.schema, nil
	}
	conn, err := dialCreating(ctx, c.opts, c.db)
	if err != nil {
		return nil, SchemaOptions{}, err
	}
	d, _, err := serverDialect(ctx, conn, c.db)
	if err != nil {
		conn.Close()
		return nil, SchemaOptions{}, err
	}
	o := SchemaOptions{Database: c.db, Dialect: d, Retention: c.cfg.Retention, Cluster: c.cfg.Cluster}
	if err := Migrate(ctx, conn, o, c.log); err != nil {
		conn.Close()
		return nil, SchemaOptions{}, err
	}
	c.conn, c.schema = conn, o
	return conn, o, nil
}

// disconnect drops the connection after an error, so the next attempt starts afresh.
func (c *Collector) disconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// RunOnce ships what the journal holds now and returns. Errors are returned, not retried:
// the cursor stays where ClickHouse's acknowledgements put it.
func (c *Collector) RunOnce(ctx context.Context) error {
	if _, _, err := c.connect(ctx); err != nil {
		c.m.errors.WithLabelValues("connect").Inc()
		return err
	}
	return c.run(ctx, true)
}

// Run follows the journal until ctx is done, retrying with backoff while ClickHouse is down or
// failing; the unshipped events wait in the journal. It returns nil when ctx is cancelled.
func (c *Collector) Run(ctx context.Context) error {
	err := c.run(ctx, false)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *Collector) run(ctx context.Context, once bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One batch in the channel, one being inserted and one filling: back-pressure stops the
	// journal reader, and memory stays at three batches whatever the backlog.
	ch := make(chan *batch, 1)
	prodErr := make(chan error, 1)
	go func() {
		defer close(ch)
		prodErr <- c.produce(ctx, c.cur.state.Shipped, once, ch)
	}()
	for b := range ch {
		if err := c.ship(ctx, b, once); err != nil {
			cancel()
			for range ch {
			}
			<-prodErr
			return err
		}
		select {
		case c.free <- b:
		default:
		}
	}
	return <-prodErr
}

// decodeRun is how many records are decoded together (in parallel) before being batched.
const decodeRun = 64

// produce reads the journal from pos and sends batches, full ones at once and partial ones
// when their oldest row has waited BatchInterval (or at the end, when once).
func (c *Collector) produce(ctx context.Context, pos journal.Position, once bool, out chan<- *batch) error {
	poll := min(max(c.cfg.BatchInterval/4, 10*time.Millisecond), 250*time.Millisecond)
	var b *batch
	var opened time.Time
	newBatch := func() {
		select {
		case b = <-c.free:
		default:
			b = &batch{}
		}
		b.reset(pos, c.cfg.BatchRows)
		opened = time.Now()
		c.m.opened(b)
	}
	send := func() error {
		select {
		case out <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		newBatch()
		return nil
	}
	newBatch()
	// Records are decoded in runs, on all cores, then added to batches in order.
	var run []*decoded
	for {
		size, err := journal.Size(c.dir, pos)
		if err != nil {
			return fmt.Errorf("journal backlog: %w", err)
		}
		if size > 0 {
			flush := func() error {
				decodeAll(run, c.workers)
				for _, d := range run {
					if d.err != nil {
						// A record with a good CRC that does not decode cannot get better by
						// waiting: skip it loudly rather than stop shipping for good.
						c.m.problems.Inc()
						c.log.Warn("journal record skipped", "segment", d.pos.Segment, "offset", d.pos.Offset, "reason", d.err)
					} else if t := b.addDecoded(d); !b.noted && !t.IsZero() {
						c.m.noted(b, t)
						b.noted = true
					}
					b.end, pos = d.next, d.next
					if b.rows() >= c.cfg.BatchRows {
						if err := send(); err != nil {
							return err
						}
					}
				}
				run = run[:0]
				return nil
			}
			res, err := journal.Scan(c.dir, pos, func(r journal.Record) error {
				run = appendDecoded(run, r)
				if len(run) >= decodeRun {
					return flush()
				}
				return nil
			})
			if err == nil {
				err = flush()
			}
			c.warnProblems(res.Problems)
			if err != nil {
				return err
			}
			if pos.Less(res.End) {
				// The scan moved past a damaged segment's rest: the cursor moves with it.
				b.end, pos = res.End, res.End
			}
		}
		if b.end != b.start && (once || time.Since(opened) >= c.cfg.BatchInterval) {
			if err := send(); err != nil {
				return err
			}
		} else if b.end == b.start {
			opened = time.Now()
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// warnProblems reports each skipped torn tail or corrupt record once.
func (c *Collector) warnProblems(ps []journal.Problem) {
	for _, p := range ps {
		if c.warned[p.Pos] {
			continue
		}
		c.warned[p.Pos] = true
		c.m.problems.Inc()
		c.log.Warn("journal record skipped", "segment", p.Pos.Segment, "offset", p.Pos.Offset, "reason", p.Reason)
	}
}

// ship inserts a batch and moves the cursor past it, retrying with backoff until it succeeds
// (or, when once, failing on the first error).
func (c *Collector) ship(ctx context.Context, b *batch, once bool) error {
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		err := c.shipOnce(ctx, b)
		if err == nil {
			c.log.Debug("batch shipped", "rows", b.rows(), "took", time.Since(t0), "journal_to", b.end.String())
			c.m.acked(b)
			c.updateBacklog()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if once {
			return err
		}
		c.m.retries.Inc()
		c.log.Warn("shipping to clickhouse failed; events stay in the journal and are retried",
			"attempt", attempt+1, "retry_in", backoff, "journal_from", b.start.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
}

func (c *Collector) shipOnce(ctx context.Context, b *batch) error {
	conn, o, err := c.connect(ctx)
	if err != nil {
		c.m.errors.WithLabelValues("connect").Inc()
		return err
	}
	st := c.cur.state
	// Rows of this batch may be in ClickHouse already when an earlier attempt at the same
	// records was not acknowledged (in flight past what was shipped).
	replay := st.Shipped.Less(st.InFlight) && b.start.Less(st.InFlight)
	if !replay && b.rows() > 0 {
		if err := c.cur.save(cursorState{Destination: st.Destination, Shipped: st.Shipped, InFlight: b.end}); err != nil {
			c.m.errors.WithLabelValues("cursor").Inc()
			return err
		}
	}
	if err := c.insertBatch(ctx, conn, o, b, replay); err != nil {
		c.m.errors.WithLabelValues("insert").Inc()
		c.disconnect()
		return err
	}
	inFlight := st.InFlight
	if inFlight.Less(b.end) {
		inFlight = b.end
	}
	if err := c.cur.save(cursorState{Destination: st.Destination, Shipped: b.end, InFlight: inFlight}); err != nil {
		c.m.errors.WithLabelValues("cursor").Inc()
		return err
	}
	c.m.batches.Inc()
	c.m.shippedOffset.Set(float64(b.end.Segment))
	return nil
}

type tableRows struct {
	table string
	cols  []column
	keys  func() []string // the rows' identities, for the replay check
}

func (c *Collector) insertBatch(ctx context.Context, conn driver.Conn, o SchemaOptions, b *batch, replay bool) error {
	tables := []tableRows{
		{"call_starts", b.starts.columns(o.Dialect), func() []string { return callKeys(b.starts.callKey, b.starts.tenant, b.starts.callID, nil) }},
		{"calls", b.calls.columns(o.Dialect), func() []string { return callKeys(b.calls.callKey, b.calls.tenant, b.calls.callID, nil) }},
		{"events", b.events.columns(o.Dialect), func() []string {
			return callKeys(b.events.callKey, b.events.tenant, b.events.callID, b.events.seq)
		}},
		{"alerts", b.alerts.columns(o.Dialect), func() []string {
			return callKeys(b.alerts.callKey, b.alerts.tenant, b.alerts.callID, b.alerts.seq)
		}},
	}
	block := insertBlock
	if o.Cluster != "" {
		// Acknowledged must mean stored on the shard, not queued on this node.
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
		// A synchronous insert into a Distributed table is not squashed: each block would
		// be an insert of its own on the shards.
		block = 0
	}
	for _, t := range tables {
		n := rowCount(t.cols)
		if n == 0 {
			continue
		}
		cols := t.cols
		if replay {
			keep, skipped, err := c.missing(ctx, conn, o, t.table, t.cols, t.keys())
			if err != nil {
				return err
			}
			if skipped > 0 {
				c.m.replayed.Add(float64(skipped))
				c.log.Info("replayed batch: rows already in clickhouse not inserted again", "table", t.table, "rows", skipped)
				cols = filterColumns(cols, keep)
				n -= skipped
			}
			if n == 0 {
				continue
			}
		}
		if err := insert(ctx, conn, o.Table(t.table), cols, block); err != nil {
			return err
		}
		c.m.rows.WithLabelValues(t.table).Add(float64(n))
	}
	return nil
}

func rowCount(cols []column) int {
	if len(cols) == 0 {
		return 0
	}
	if v, ok := stringColumn(cols, "call_id"); ok { // in every table
		return len(v)
	}
	return 0
}

// stringColumn finds a column by name: the generated events columns follow agent/event's
// order, not the table's.
func stringColumn(cols []column, name string) ([]string, bool) {
	for _, c := range cols {
		if c.name == name {
			v, ok := c.values.([]string)
			return v, ok
		}
	}
	return nil, false
}

// callKeys are rows' identities for the replay check: the call's key (its tenant and id for
// rows made before calls had keys) and, for events and alerts, the event's sequence number.
// A caller's id alone would let one tenant's rows pass for another's.
func callKeys(callKeys, tenants, callIDs []string, seqs []uint64) []string {
	keys := make([]string, len(callIDs))
	for i := range callIDs {
		keys[i] = rowKey(callKeys[i], tenants[i], callIDs[i])
		if seqs != nil {
			keys[i] += fmt.Sprintf("/%d", seqs[i])
		}
	}
	return keys
}

func rowKey(callKey, tenant, callID string) string {
	if callKey != "" {
		return callKey
	}
	return tenant + "/" + callID
}

// missing finds which of a replayed batch's rows ClickHouse already has; keep marks the
// others.
func (c *Collector) missing(ctx context.Context, conn driver.Conn, o SchemaOptions, table string, cols []column, keys []string) ([]bool, int, error) {
	callIDs, _ := stringColumn(cols, "call_id")
	tenants, _ := stringColumn(cols, "tenant")
	tools, _ := stringColumn(cols, "tool")
	have := map[string]bool{}
	ids := distinct(callIDs)
	const chunk = 500 // keeps the query under max_query_size
	for i := 0; i < len(ids); i += chunk {
		part := ids[i:min(i+chunk, len(ids))]
		where := fmt.Sprintf("tenant IN (%s) AND tool IN (%s) AND call_id IN (%s)",
			quoteList(distinct(tenants)), quoteList(distinct(tools)), quoteList(part))
		q := "SELECT call_key, tenant, call_id FROM " + o.Table(table) + " WHERE " + where
		withSeq := table == "events" || table == "alerts"
		if withSeq {
			q = "SELECT call_key, tenant, call_id, seq FROM " + o.Table(table) + " WHERE " + where
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, 0, fmt.Errorf("check replayed rows in %s: %w", table, err)
		}
		for rows.Next() {
			var key, tenant, callID string
			var seq uint64
			var err error
			if withSeq {
				err = rows.Scan(&key, &tenant, &callID, &seq)
			} else {
				err = rows.Scan(&key, &tenant, &callID)
			}
			id := rowKey(key, tenant, callID)
			if withSeq {
				id = fmt.Sprintf("%s/%d", id, seq)
			}
			if err != nil {
				rows.Close()
				return nil, 0, fmt.Errorf("check replayed rows in %s: %w", table, err)
			}
			have[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, 0, fmt.Errorf("check replayed rows in %s: %w", table, err)
		}
	}
	keep := make([]bool, len(keys))
	skipped := 0
	for i, k := range keys {
		keep[i] = !have[k]
		if have[k] {
			skipped++
		}
		// A key twice in one batch would be inserted twice: keep the first only.
		have[k] = true
	}
	return keep, skipped, nil
}

func distinct(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// updateBacklog measures the unshipped journal and warns when it passes the limit.
func (c *Collector) updateBacklog() {
	size, err := journal.Size(c.dir, c.cur.state.Shipped)
	if err != nil {
		c.m.errors.WithLabelValues("journal").Inc()
		return
	}
	c.m.backlog.Set(float64(size))
	over := c.cfg.MaxBacklogBytes > 0 && size > c.cfg.MaxBacklogBytes
	if over && !c.overLim {
		c.log.Warn("unshipped journal exceeds the backlog limit; nothing is deleted, check ClickHouse",
			"backlog_bytes", size, "limit_bytes", c.cfg.MaxBacklogBytes)
	} else if !over && c.overLim {
		c.log.Info("unshipped journal back under the backlog limit", "backlog_bytes", size)
	}
	c.overLim = over
	if over {
		c.m.backlogOver.Set(1)
	} else {
		c.m.backlogOver.Set(0)
	}
}
