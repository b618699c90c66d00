-- berm audit tables for current ClickHouse (20.3 and later): DateTime64(9) times, LowCardinality
-- for the small vocabularies, IPv6 addresses (IPv4 mapped), codecs, and TTL retention.
-- Every table is a ReplacingMergeTree on the record's identity: the collector's insert is
-- idempotent already, the engine is the second line of defence.

CREATE TABLE IF NOT EXISTS {{.T "call_starts"}}{{.OnCluster}} (
    tenant LowCardinality(String),
    tool LowCardinality(String),
    call_id String,
    start_time DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    node LowCardinality(String),
    policy LowCardinality(String),
    policy_hash LowCardinality(String),
    cgroup_id UInt64,
    argv Array(String) CODEC(ZSTD(1)),
    layers Array(LowCardinality(String)),
    raw String CODEC(ZSTD(3))
) ENGINE = {{.Engine "call_starts"}}
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id){{.TTL "start_time"}};

CREATE TABLE IF NOT EXISTS {{.T "calls"}}{{.OnCluster}} (
    tenant LowCardinality(String),
    tool LowCardinality(String),
    call_id String,
    start_time DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    end_time DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    duration_ns Int64 CODEC(T64, ZSTD(1)),
    node LowCardinality(String),
    policy LowCardinality(String),
    policy_hash LowCardinality(String),
    argv Array(String) CODEC(ZSTD(1)),
    layers Array(LowCardinality(String)),
    exit_status Int32,
    exit_code Int32,
    exit_signal Int32,
    end_reason LowCardinality(String),
    end_detail String,
    cpu_time_ns UInt64 CODEC(T64, ZSTD(1)),
    peak_memory_bytes UInt64 CODEC(T64, ZSTD(1)),
    output_bytes Int64 CODEC(T64, ZSTD(1)),
    syscall_total UInt64 CODEC(T64, ZSTD(1)),
    syscall_names Array(LowCardinality(String)),
    syscall_counts Array(UInt64),
    denial_surfaces Array(LowCardinality(String)),
    denial_counts Array(UInt64),
    events UInt64,
    alerts UInt64,
    dropped_kernel UInt64,
    dropped_user UInt64,
    raw String CODEC(ZSTD(3))
) ENGINE = {{.Engine "calls"}}
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id){{.TTL "start_time"}};

CREATE TABLE IF NOT EXISTS {{.T "events"}}{{.OnCluster}} (
    tenant LowCardinality(String),
    tool LowCardinality(String),
    call_id String,
    seq UInt64 CODEC(Delta, ZSTD(1)),
    time DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    kind LowCardinality(String),
    pid UInt32 CODEC(T64, ZSTD(1)),
    tid UInt32 CODEC(T64, ZSTD(1)),
    ppid UInt32 CODEC(T64, ZSTD(1)),
    uid UInt32 CODEC(T64, ZSTD(1)),
    comm LowCardinality(String),
    exe LowCardinality(String),
    parent_exe LowCardinality(String),
    path String CODEC(ZSTD(1)),
    addr IPv6,
    port UInt16,
    result Int64 CODEC(T64, ZSTD(1)),
    errno LowCardinality(String),
    syscall LowCardinality(String),
    rule LowCardinality(String),
    detail String CODEC(ZSTD(3))
) ENGINE = {{.Engine "events"}}
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, tool, call_id, time, seq){{.TTL "time"}};

CREATE TABLE IF NOT EXISTS {{.T "alerts"}}{{.OnCluster}} (
    tenant LowCardinality(String),
    tool LowCardinality(String),
    call_id String,
    seq UInt64,
    time DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    rule_id LowCardinality(String),
    title String,
    severity LowCardinality(String),
    surface LowCardinality(String),
    technique Array(LowCardinality(String)),
    output String CODEC(ZSTD(1)),
    event_seq UInt64
) ENGINE = {{.Engine "alerts"}}
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, time, call_id, seq){{.TTL "time"}};
