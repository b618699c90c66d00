package event

// Enforcement and observation layers, one name each: records, metrics, ClickHouse and the CLI
// all use these.
const (
	LayerSeccomp    = "seccomp"
	LayerLandlock   = "landlock"
	LayerCgroupSock = "bpf-cgroup-sock"
	LayerLSM        = "bpf-lsm"
	LayerMount      = "mount"
	LayerTrace      = "ebpf-trace"
)
