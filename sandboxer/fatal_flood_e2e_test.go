package sandboxer_test

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/testenv/bermbin"
)

// stalledRules is a rules evaluator that stops at the tool's first flood event until the
// test releases it: a decoder stalled as a slow rule or a slow path lookup stalls it (which a
// hostile tool can provoke). Behind it the queue and the one-page ring fill, and every later
// event of the call is dropped in the kernel.
type stalledRules struct {
	once    sync.Once
	release chan struct{}
}

func (s *stalledRules) Eval(ev *event.Event) []event.Event {
	if ev.Kind == event.KindOpen && strings.HasPrefix(ev.Open.Path, "/nonexistent/") {
		s.once.Do(func() { <-s.release })
	}
	return nil
}

func (s *stalledRules) EndCall(string) {}

// A fatal syscall is enforced where no event can be lost: with the agent's decoder stalled and
// its ring full, the fatal attempt's event cannot reach user space, and the tool still dies
// of it and the call still ends as policy_kill. When the agent killed on seeing the refusal,
// the tool printed "survived" and ran on to its wall time.
func TestFatalSyscallUnderFlood(t *testing.T) {
	bermbin.RequireRoot(t)
	stall := &stalledRules{release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(stall.release)
		}
	}
	defer release()
	a, err := sandboxer.NewAgent(agent.Config{
		StateDir:     t.TempDir(),
		Tracer:       tracer.Config{RingBytes: 4096, WakeupBytes: 2048},
		QueueBatches: 1,
		Rules:        stall,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pol, err := policy.Parse("fatal.yaml", []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: strict-fatal}\nspec:\n  syscalls:\n    fatal: [ptrace]\n"))
	if err != nil {
		t.Fatal(err)
	}
	script := `import ctypes, os
def flood(tag, n):
    i = 0
    while n < 0 or i < n:
        try: os.open("/nonexistent/%s%d" % (tag, i), 0)
        except OSError: pass
        i += 1
for k in range(2):
    if os.fork() == 0:
        flood("c%d-" % k, -1)
flood("m", 1000)
ctypes.CDLL(None).ptrace(16, 1, 0, 0)
print("survived", flush=True)
flood("after", -1)`
	limits := sandboxer.DefaultLimits
	limits.WallTime = 30 * time.Second // a survivor floods on until then
	var stdout, stderr bytes.Buffer
	out, err := sandboxer.Run(sandboxer.Spec{
		CallID: "fatal-flood", Tool: "flood", Tenant: "default",
		Argv:      []string{"/usr/bin/python3", "-c", script},
		Workspace: bermbin.Workspace(t), UID: 65534, GID: 65534,
		Limits: limits, Policy: pol,
		Init:   bermbin.Path(t, "berm-init"),
		Stdout: &stdout, Stderr: &stderr,
	}, sandboxer.Local{Agent: a})
	release()
	if out == nil {
		t.Fatal(err)
	}
	t.Logf("run: %v", err) // the end-of-call barrier gives up on the stalled decoder
	rec := out.Record
	t.Logf("exit %d, dropped %+v, end %s %q", out.ExitStatus, rec.Dropped, rec.EndReason, rec.EndDetail)
	if rec.EndReason == event.EndPolicyKill && !strings.Contains(rec.EndDetail, "not seen") {
		t.Errorf("the fatal attempt's event was seen: the stall did not hold")
	}
	if out.ExitStatus != 128+int(unix.SIGSYS) || strings.Contains(stdout.String(), "survived") {
		t.Fatalf("exit %d, stdout %q, stderr %q: the call survived its fatal syscall", out.ExitStatus, stdout.String(), stderr.String())
	}
	if rec.EndReason != event.EndPolicyKill || !strings.Contains(rec.EndDetail, "ptrace") {
		t.Fatalf("record: %s %q", rec.EndReason, rec.EndDetail)
	}
	if rec.Dropped.Kernel+rec.Dropped.User == 0 {
		t.Fatal("the flood lost no event: this run does not show a kill independent of the trail")
	}
}
