package event

import "testing"

// Every end berm makes has its own exit status, none of them one a tool's death by a signal
// gives (128+N, N up to 64); the tool's own ends keep the tool's status.
func TestEndedStatusIsDistinctPerReasonAndFromEverySignal(t *testing.T) {
	seen := map[int]EndReason{}
	for _, tc := range []struct {
		reason EndReason
		status int
		ok     bool
	}{
		{EndExit, 0, false},
		{EndSignal, 0, false},
		{EndUnknown, 0, false},
		{EndTimeout, 241, true},
		{EndMemoryLimit, 242, true},
		{EndPidsLimit, 243, true},
		{EndOutputLimit, 244, true},
		{EndTmpLimit, 245, true},
		{EndDiskLimit, 246, true},
		{EndPolicyKill, 247, true},
		{EndInterrupted, 248, true},
		{EndClientLost, 249, true},
		{EndSetupFailed, 125, true},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			status, ok := EndedStatus(tc.reason)
			if status != tc.status || ok != tc.ok {
				t.Fatalf("EndedStatus(%s) = %d, %v; want %d, %v", tc.reason, status, ok, tc.status, tc.ok)
			}
			if !ok {
				return
			}
			if other, dup := seen[status]; dup {
				t.Errorf("%s and %s share status %d", tc.reason, other, status)
			}
			seen[status] = tc.reason
			if status > 128 && status <= 128+64 {
				t.Errorf("%s's status %d is a death by signal %d", tc.reason, status, status-128)
			}
		})
	}
}
