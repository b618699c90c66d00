package event

// Exit statuses of calls berm ended. berm run exits with the tool's own status when the tool
// ended by itself (its exit code, or 128+N when a signal N killed it: 137 is a tool that died
// of SIGKILL, whoever sent it), and with one of these when berm ended the call (a cap, a fatal
// syscall, berm run interrupted, the caller gone): codes above 192, which no death by a signal
// gives (128+64 at most), one per end reason. A tool can still exit(241) itself; the record's
// end_reason tells the two apart, and its exit_code and exit_signal keep what became of the
// tool (exit_signal 9: berm's kill). A call that never ran (setup_failed) exits 125, or the
// tool's stage's own code (126 not executable, 127 not found).
const (
	StatusTimeout     = 241 // EndTimeout: the wall-time cap
	StatusMemoryLimit = 242 // EndMemoryLimit
	StatusPidsLimit   = 243 // EndPidsLimit
	StatusOutputLimit = 244 // EndOutputLimit
	StatusTmpLimit    = 245 // EndTmpLimit
	StatusDiskLimit   = 246 // EndDiskLimit
	StatusPolicyKill  = 247 // EndPolicyKill: a syscall the policy marks fatal
	StatusInterrupted = 248 // EndInterrupted: berm run got SIGINT or SIGTERM
	StatusClientLost  = 249 // EndClientLost: the caller went away (bermd)
	StatusSetupFailed = 125 // EndSetupFailed, when the tool's stage gave no code of its own
)

// EndedStatus is the exit status of a call berm ended for reason r; ok is false for a reason
// that is the tool's own end (exit, signal) or no end (incomplete): its status is the tool's.
func EndedStatus(r EndReason) (status int, ok bool) {
	switch r {
	case EndTimeout:
		return StatusTimeout, true
	case EndMemoryLimit:
		return StatusMemoryLimit, true
	case EndPidsLimit:
		return StatusPidsLimit, true
	case EndOutputLimit:
		return StatusOutputLimit, true
	case EndTmpLimit:
		return StatusTmpLimit, true
	case EndDiskLimit:
		return StatusDiskLimit, true
	case EndPolicyKill:
		return StatusPolicyKill, true
	case EndInterrupted:
		return StatusInterrupted, true
	case EndClientLost:
		return StatusClientLost, true
	case EndSetupFailed:
		return StatusSetupFailed, true
	}
	return 0, false
}
