package sandboxer

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/bermsec/berm/sandboxer/cgroup"
)

// lingerUntilEmpty waits out the processes of an ended call that survived every kill (stuck
// in uninterruptible sleep): it freezes them, keeps killing, and releases the call from the
// agent only once its cgroup is empty. Until then the call stays registered, so whatever runs
// there is traced and its egress refused, never left unjudged.
func lingerUntilEmpty(call CallRecorder, cg *cgroup.Cgroup) {
	_ = os.WriteFile(filepath.Join(cg.V2, "cgroup.freeze"), []byte("1"), 0)
	for attempt := 0; ; attempt++ {
		if err := cg.KillAndWait(time.Minute); err == nil {
			break
		} else if attempt%10 == 0 {
			slog.Warn("processes of an ended call survive every kill; the call stays registered", "cgroup", cg.V2, "err", err)
		}
	}
	if err := call.Release(); err != nil {
		slog.Error("release a call whose cgroup emptied", "cgroup", cg.V2, "err", err)
	}
}
