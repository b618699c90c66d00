-- berm collector schema: dialect legacy, sharded over cluster berm

CREATE TABLE IF NOT EXISTS berm.schema_migrations (
    version UInt32,
    name String,
    dialect String,
    applied_at DateTime
) ENGINE = ReplacingMergeTree()
ORDER BY version;

-- migration 0001 init

CREATE TABLE IF NOT EXISTS berm.call_starts_local (
    tenant String,
    tool String,
    call_id String,
    start_time DateTime,
    start_ns UInt32,
    node String,
    policy String,
    policy_hash String,
    cgroup_id UInt64,
    argv Array(String),
    layers Array(String),
    raw String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id);

CREATE TABLE IF NOT EXISTS berm.calls_local (
    tenant String,
    tool String,
    call_id String,
    start_time DateTime,
    start_ns UInt32,
    end_time DateTime,
    end_ns UInt32,
    duration_ns Int64,
    node String,
    policy String,
    policy_hash String,
    argv Array(String),
    layers Array(String),
    exit_status Int32,
    exit_code Int32,
    exit_signal Int32,
    end_reason String,
    end_detail String,
    cpu_time_ns UInt64,
    peak_memory_bytes UInt64,
    output_bytes Int64,
    syscall_total UInt64,
    syscall_names Array(String),
    syscall_counts Array(UInt64),
    denial_surfaces Array(String),
    denial_counts Array(UInt64),
    events UInt64,
    alerts UInt64,
    dropped_kernel UInt64,
    dropped_user UInt64,
    raw String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(start_time)
ORDER BY (tenant, tool, start_time, call_id);

CREATE TABLE IF NOT EXISTS berm.events_local (
    tenant String,
    tool String,
    call_id String,
    seq UInt64,
    time DateTime,
    time_ns UInt32,
    kind String,
    pid UInt32,
    tid UInt32,
    ppid UInt32,
    uid UInt32,
    comm String,
    exe String,
    parent_exe String,
    path String,
    addr FixedString(16),
    port UInt16,
    result Int64,
    errno String,
    syscall String,
    rule String,
    detail String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, tool, call_id, time, seq);

CREATE TABLE IF NOT EXISTS berm.alerts_local (
    tenant String,
    tool String,
    call_id String,
    seq UInt64,
    time DateTime,
    time_ns UInt32,
    rule_id String,
    title String,
    severity String,
    surface String,
    technique Array(String),
    output String,
    event_seq UInt64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (tenant, time, call_id, seq);

CREATE TABLE IF NOT EXISTS berm.call_starts AS berm.call_starts_local
ENGINE = Distributed(berm, berm, call_starts_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.calls AS berm.calls_local
ENGINE = Distributed(berm, berm, calls_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.events AS berm.events_local
ENGINE = Distributed(berm, berm, events_local, cityHash64(call_id));

CREATE TABLE IF NOT EXISTS berm.alerts AS berm.alerts_local
ENGINE = Distributed(berm, berm, alerts_local, cityHash64(call_id));

-- migration 0002 add_complete_incomplete_reason_phase

ALTER TABLE berm.calls_local ADD COLUMN complete UInt8;

ALTER TABLE berm.calls_local ADD COLUMN incomplete_reason String;

ALTER TABLE berm.events_local ADD COLUMN phase String;

ALTER TABLE berm.calls ADD COLUMN complete UInt8;

ALTER TABLE berm.calls ADD COLUMN incomplete_reason String;

ALTER TABLE berm.events ADD COLUMN phase String;

-- migration 0003 add_aggregated

ALTER TABLE berm.calls_local ADD COLUMN aggregated UInt64;

ALTER TABLE berm.calls ADD COLUMN aggregated UInt64;

-- migration 0004 add_call_key

ALTER TABLE berm.events_local ADD COLUMN call_key String;

ALTER TABLE berm.events ADD COLUMN call_key String;

-- migration 0005 add_call_key_calls

ALTER TABLE berm.call_starts_local ADD COLUMN call_key String;

ALTER TABLE berm.calls_local ADD COLUMN call_key String;

ALTER TABLE berm.alerts_local ADD COLUMN call_key String;

ALTER TABLE berm.call_starts ADD COLUMN call_key String;

ALTER TABLE berm.calls ADD COLUMN call_key String;

ALTER TABLE berm.alerts ADD COLUMN call_key String;

-- migration 0006 add_surfaces

ALTER TABLE berm.calls_local ADD COLUMN surfaces Array(String);

ALTER TABLE berm.calls_local ADD COLUMN surface_states Array(String);

ALTER TABLE berm.calls_local ADD COLUMN surface_layers Array(Array(String));

ALTER TABLE berm.calls_local ADD COLUMN surface_violations Array(UInt64);

ALTER TABLE berm.calls ADD COLUMN surfaces Array(String);

ALTER TABLE berm.calls ADD COLUMN surface_states Array(String);

ALTER TABLE berm.calls ADD COLUMN surface_layers Array(Array(String));

ALTER TABLE berm.calls ADD COLUMN surface_violations Array(UInt64);

-- migration 0007 add_approval

ALTER TABLE berm.events_local ADD COLUMN approval_outcome String;

ALTER TABLE berm.events_local ADD COLUMN approval_id String;

ALTER TABLE berm.events_local ADD COLUMN approval_action String;

ALTER TABLE berm.events_local ADD COLUMN approval_by String;

ALTER TABLE berm.events_local ADD COLUMN approval_channel String;

ALTER TABLE berm.events_local ADD COLUMN approval_latency_ns Int64;

ALTER TABLE berm.events ADD COLUMN approval_outcome String;

ALTER TABLE berm.events ADD COLUMN approval_id String;

ALTER TABLE berm.events ADD COLUMN approval_action String;

ALTER TABLE berm.events ADD COLUMN approval_by String;

ALTER TABLE berm.events ADD COLUMN approval_channel String;

ALTER TABLE berm.events ADD COLUMN approval_latency_ns Int64;

-- migration 0008 add_dns_type_dns_verdict

ALTER TABLE berm.events_local ADD COLUMN dns_type String;

ALTER TABLE berm.events_local ADD COLUMN dns_verdict String;

ALTER TABLE berm.events ADD COLUMN dns_type String;

ALTER TABLE berm.events ADD COLUMN dns_verdict String;

-- migration 0009 add_dropped_dns

ALTER TABLE berm.calls_local ADD COLUMN dropped_dns UInt64;

ALTER TABLE berm.calls ADD COLUMN dropped_dns UInt64;

-- migration 0010 add_path_changed

ALTER TABLE berm.events_local ADD COLUMN path_changed UInt8;

ALTER TABLE berm.events ADD COLUMN path_changed UInt8;

-- migration 0011 add_mcp_method_mcp_phase_mcp_request_id_mcp_stat

ALTER TABLE berm.events_local ADD COLUMN mcp_phase String;

ALTER TABLE berm.events_local ADD COLUMN mcp_method String;

ALTER TABLE berm.events_local ADD COLUMN mcp_request_id String;

ALTER TABLE berm.events_local ADD COLUMN mcp_status String;

ALTER TABLE berm.events ADD COLUMN mcp_phase String;

ALTER TABLE berm.events ADD COLUMN mcp_method String;

ALTER TABLE berm.events ADD COLUMN mcp_request_id String;

ALTER TABLE berm.events ADD COLUMN mcp_status String;

-- migration 0012 add_surface_reasons

ALTER TABLE berm.calls_local ADD COLUMN surface_reasons Array(String);

ALTER TABLE berm.calls ADD COLUMN surface_reasons Array(String);
