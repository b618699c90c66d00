package event

// Layers are the mechanisms that observe or enforce a call. Each has one name, used in call
// records (CallStart.Layers), denials (Denial.Layer), compiled policy rules, metrics labels,
// ClickHouse rows and the CLI.
const (
	LayerTrace        = "ebpf-trace"      // the eBPF tracer: every event of the call
	LayerCgroup       = "cgroup"          // the call's own cgroup: identity, caps, kill
	LayerNamespaces   = "namespaces"      // mount, pid, ipc, uts, cgroup, net namespaces
	LayerNoNewPrivs   = "no_new_privs"    // no privilege gained through exec
	LayerMount        = "mount"           // the call's own root: what is bound, read-only, masked
	LayerLandlock     = "landlock"        // file-system access rules (CallStart.LandlockABI says which)
	LayerSeccomp      = "seccomp"         // syscall filter
	LayerCgroupSock   = "bpf-cgroup-sock" // cgroup socket hooks: egress by address and port, socket types
	LayerLSM          = "bpf-lsm"         // BPF LSM file policy (where the kernel allows trampolines)
	LayerCapabilities = "capabilities"    // the kernel's capability checks (the call has none)
	LayerLeftovers    = "leftovers"       // the launcher's sweep of the workspace after the call
	LayerApproval     = "approval"        // gated syscalls held at a seccomp user notification until a person decides
	// LayerCredentials: the call holds only what the per-call broker gave it (a clean
	// environment, brokered credentials revoked at its end), and its output is scanned for
	// credentials (its own, other calls', the policy's patterns) and redacted.
	LayerCredentials = "credential-broker"
	// LayerInject: the call's injected credentials' secrets never entered it; berm's egress,
	// where the kernel sends its connects to their hosts, put them in (agent/inject).
	LayerInject = "inject"
)

// Surfaces are the six sandbox surfaces a call is bounded by: every denial, alert and limit is
// attributed to one of them.
const (
	SurfaceIsolation     = "isolation"
	SurfaceResource      = "resource"
	SurfacePolicy        = "policy"
	SurfaceCredential    = "credential"
	SurfaceApproval      = "approval"
	SurfaceObservability = "observability"
)

// Surface states: how a call's surface stood (SurfaceState.State). Violated is not a state but
// an overlay on any of them (SurfaceState.Violated); StateViolated names it where one word
// must say both, as in a cell of berm matrix.
const (
	StateEnforced = "enforced" // a layer enforced the surface
	StateAudit    = "audit"    // the policy's mode is audit: recorded, not blocked
	StateDegraded = "degraded" // configured, but a layer it needs was refused (by the kernel, or events were lost)
	StateAbsent   = "absent"   // nothing configured or enforced it
	StateViolated = "violated" // denials, alerts or cap hits were attributed to it
)

// Surfaces lists the surfaces in their stable order.
var Surfaces = []string{SurfaceIsolation, SurfaceResource, SurfacePolicy, SurfaceCredential, SurfaceApproval, SurfaceObservability}

// Resources are the caps a call can hit (Limit.Resource); each ends the call with its own
// EndReason.
const (
	ResourceMemory    = "memory"
	ResourcePids      = "pids"
	ResourceWallTime  = "wall_time"
	ResourceOutput    = "output"
	ResourceTmp       = "tmp"
	ResourceTmpInodes = "tmp_inodes"
	ResourceDisk      = "disk"   // bytes the call added to its workspace's file system
	ResourceInodes    = "inodes" // inodes the call added there
)
