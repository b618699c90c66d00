-- berm collector schema: dialect modern, sharded over cluster berm

CREATE TABLE IF NOT EXISTS berm.schema_migrations ON CLUSTER berm (
    version UInt32,
    name String,
    dialect String,
    applied_at DateTime
) ENGINE = ReplacingMergeTree()
ORDER BY version;

-- migration 0001 init

CREATE TABLE IF NOT EXISTS berm.call_starts_local ON CLUSTER berm (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/berm/call_starts_local', '{replica}')
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id)
TTL toDateTime(start_time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS berm.calls_local ON CLUSTER berm (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/berm/calls_local', '{replica}')
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id)
TTL toDateTime(start_time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS berm.events_local ON CLUSTER berm (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/berm/events_local', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, tool, call_id, time, seq)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS berm.alerts_local ON CLUSTER berm (
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
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/berm/alerts_local', '{replica}')
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, time, call_id, seq)
TTL toDateTime(time) + INTERVAL 30 DAY;

CREATE TABLE IF NOT EXISTS berm.call_starts ON CLUSTER berm AS berm.call_starts_local
ENGINE = Distributed(berm, berm, call_starts_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.calls ON CLUSTER berm AS berm.calls_local
ENGINE = Distributed(berm, berm, calls_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.events ON CLUSTER berm AS berm.events_local
ENGINE = Distributed(berm, berm, events_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.alerts ON CLUSTER berm AS berm.alerts_local
ENGINE = Distributed(berm, berm, alerts_local, cityHash64(call_id));

-- migration 0002 add_complete_incomplete_reason_phase

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS complete UInt8;

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS incomplete_reason String;

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS phase LowCardinality(String);

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS complete UInt8;

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS incomplete_reason String;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS phase LowCardinality(String);

-- migration 0003 add_aggregated

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS aggregated UInt64;

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS aggregated UInt64;

-- migration 0004 add_call_key

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

-- migration 0005 add_call_key_calls

ALTER TABLE berm.call_starts_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.alerts_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.call_starts ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

ALTER TABLE berm.alerts ON CLUSTER berm ADD COLUMN IF NOT EXISTS call_key String;

-- migration 0006 add_surfaces

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS surfaces Array(String);

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_states Array(String);

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_layers Array(Array(String));

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_violations Array(UInt64);

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS surfaces Array(String);

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_states Array(String);

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_layers Array(Array(String));

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_violations Array(UInt64);

-- migration 0007 add_approval

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_outcome LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_id String;

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_action LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_by LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_channel LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_latency_ns Int64;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_outcome LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_id String;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_action LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_by LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_channel LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS approval_latency_ns Int64;

-- migration 0008 add_dns_type_dns_verdict

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS dns_type LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS dns_verdict LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS dns_type LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS dns_verdict LowCardinality(String);

-- migration 0009 add_dropped_dns

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS dropped_dns UInt64;

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS dropped_dns UInt64;

-- migration 0010 add_path_changed

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS path_changed UInt8;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS path_changed UInt8;

-- migration 0011 add_mcp_method_mcp_phase_mcp_request_id_mcp_stat

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_phase LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_method LowCardinality(String);

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_request_id String;

ALTER TABLE berm.events_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_status LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_phase LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_method LowCardinality(String);

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_request_id String;

ALTER TABLE berm.events ON CLUSTER berm ADD COLUMN IF NOT EXISTS mcp_status LowCardinality(String);

-- migration 0012 add_surface_reasons

ALTER TABLE berm.calls_local ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_reasons Array(String);

ALTER TABLE berm.calls ON CLUSTER berm ADD COLUMN IF NOT EXISTS surface_reasons Array(String);
