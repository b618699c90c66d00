package sandboxer

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

var testLimits = event.Limits{MemoryBytes: 512 << 20, Pids: 64, TmpBytes: 256 << 20, WallTime: time.Minute}

func TestEndReasonIsTheFirstCapALookFindsTheCallOver(t *testing.T) {
	fullTmp := unix.Statfs_t{Type: unix.TMPFS_MAGIC, Blocks: 100, Bavail: 0, Files: 50, Ffree: 10}
	noInodes := unix.Statfs_t{Type: unix.TMPFS_MAGIC, Blocks: 100, Bavail: 3, Files: 50, Ffree: 0}
	disk := &event.Limit{Resource: event.ResourceDisk, Limit: 1 << 20}
	for _, tc := range []struct {
		name   string
		look   capLook
		reason event.EndReason
		detail string
		limit  event.Limit
	}{
		{name: "nothing over a cap ends nothing", look: capLook{tmp: unix.Statfs_t{Type: unix.TMPFS_MAGIC, Blocks: 100, Bavail: 1, Files: 50, Ffree: 1}}},
		{name: "an OOM kill is the memory cap", look: capLook{cg: cgroup.Events{OOMKills: 1}},
			reason: event.EndMemoryLimit, detail: "memory cap of 536870912 bytes", limit: event.Limit{Resource: event.ResourceMemory, Limit: 512 << 20}},
		{name: "a refused fork is the process cap, counting the refusals", look: capLook{cg: cgroup.Events{PidsMax: 7}},
			reason: event.EndPidsLimit, detail: "process cap of 64", limit: event.Limit{Resource: event.ResourcePids, Limit: 64, Detail: "7 forks refused"}},
		{name: "a full /tmp is its byte cap", look: capLook{tmp: fullTmp},
			reason: event.EndTmpLimit, detail: "/tmp cap of 268435456 bytes", limit: event.Limit{Resource: event.ResourceTmp, Limit: 256 << 20}},
		{name: "a /tmp without inodes is its inode cap", look: capLook{tmp: noInodes},
			reason: event.EndTmpLimit, detail: "/tmp cap of 50 inodes", limit: event.Limit{Resource: event.ResourceTmpInodes, Limit: 50}},
		{name: "a full file system that is not the call's tmpfs is no cap", look: capLook{tmp: unix.Statfs_t{Type: 0xEF53, Blocks: 100}}},
		{name: "a /tmp not looked at is no cap", look: capLook{}},
		{name: "the disk budget says its own detail", look: capLook{disk: "disk budget of 1048576 bytes", diskLimit: disk},
			reason: event.EndDiskLimit, detail: "disk budget of 1048576 bytes", limit: *disk},
		{name: "memory comes before every other cap", look: capLook{cg: cgroup.Events{OOMKills: 1, PidsMax: 1}, tmp: fullTmp, disk: "d", diskLimit: disk},
			reason: event.EndMemoryLimit, detail: "memory cap of 536870912 bytes", limit: event.Limit{Resource: event.ResourceMemory, Limit: 512 << 20}},
		{name: "processes come before /tmp and the disk", look: capLook{cg: cgroup.Events{PidsMax: 2}, tmp: fullTmp, disk: "d", diskLimit: disk},
			reason: event.EndPidsLimit, detail: "process cap of 64", limit: event.Limit{Resource: event.ResourcePids, Limit: 64, Detail: "2 forks refused"}},
		{name: "/tmp comes before the disk", look: capLook{tmp: noInodes, disk: "d", diskLimit: disk},
			reason: event.EndTmpLimit, detail: "/tmp cap of 50 inodes", limit: event.Limit{Resource: event.ResourceTmpInodes, Limit: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hit, ok := endReason(tc.look, testLimits)
			if ok != (tc.reason != "") {
				t.Fatalf("ended: %v (%+v), want %v", ok, hit, tc.reason != "")
			}
			if !ok {
				return
			}
			if hit.reason != tc.reason || hit.detail != tc.detail || hit.limit == nil || *hit.limit != tc.limit {
				t.Errorf("got %s %q %+v, want %s %q %+v", hit.reason, hit.detail, hit.limit, tc.reason, tc.detail, tc.limit)
			}
		})
	}
}

func TestEndStatusSaysHowTheCallEnded(t *testing.T) {
	const kill = 9
	exited := func(code int) sandboxinit.Status { return sandboxinit.Status{Started: true, Exited: true, Code: code} }
	signaled := func(sig int) sandboxinit.Status { return sandboxinit.Status{Started: true, Signal: sig} }
	for _, tc := range []struct {
		name   string
		reason event.EndReason
		late   bool
		st     sandboxinit.Status
		want   agent.Result
	}{
		{name: "a tool that exits ends by its exit", st: exited(3),
			want: agent.Result{Reason: event.EndExit, ExitCode: 3, ExitStatus: 3}},
		{name: "a tool killed by a signal ends by it, named", st: signaled(int(unix.SIGSEGV)),
			want: agent.Result{Reason: event.EndSignal, Detail: "SIGSEGV", ExitSignal: int(unix.SIGSEGV), ExitStatus: 128 + int(unix.SIGSEGV)}},
		{name: "a tool that never started is a setup failure with its code", st: sandboxinit.Status{Error: "exec: not found", Code: 127},
			want: agent.Result{Reason: event.EndSetupFailed, Detail: "exec: not found", ExitCode: 127, ExitStatus: 127}},
		{name: "a setup failure without a code exits 125", st: sandboxinit.Status{Error: "mount: denied"},
			want: agent.Result{Reason: event.EndSetupFailed, Detail: "mount: denied", ExitStatus: 125}},
		{name: "an init that said nothing was killed from outside", st: sandboxinit.Status{},
			want: agent.Result{Reason: event.EndSignal, Detail: "sandbox init ended without a status: signal: killed", ExitSignal: kill, ExitStatus: 128 + kill}},
		{name: "a cap berm ended the call for is a kill, whatever the tool said", reason: event.EndTimeout, st: exited(0),
			want: agent.Result{Reason: event.EndTimeout, Detail: "d", ExitSignal: kill, ExitStatus: event.StatusTimeout}},
		{name: "a tool that killed itself with SIGKILL exits 137, not berm's status", st: signaled(kill),
			want: agent.Result{Reason: event.EndSignal, Detail: "SIGKILL", ExitSignal: kill, ExitStatus: 128 + kill}},
		{name: "an interrupted call whose tool berm killed exits with berm's status", reason: event.EndInterrupted, st: signaled(kill),
			want: agent.Result{Reason: event.EndInterrupted, Detail: "d", ExitSignal: kill, ExitStatus: event.StatusInterrupted}},
		{name: "an interrupted tool that exited keeps its status", reason: event.EndInterrupted, st: exited(130),
			want: agent.Result{Reason: event.EndInterrupted, Detail: "d", ExitCode: 130, ExitStatus: 130}},
		{name: "a lost client's tool that exited keeps its status", reason: event.EndClientLost, st: exited(1),
			want: agent.Result{Reason: event.EndClientLost, Detail: "d", ExitCode: 1, ExitStatus: 1}},
		{name: "a cap found after the tool exited keeps the tool's status", reason: event.EndMemoryLimit, late: true, st: exited(2),
			want: agent.Result{Reason: event.EndMemoryLimit, Detail: "d", ExitCode: 2, ExitStatus: 2}},
		{name: "the memory cap's OOM kill found after the tool died is the cap's end", reason: event.EndMemoryLimit, late: true, st: signaled(kill),
			want: agent.Result{Reason: event.EndMemoryLimit, Detail: "d", ExitSignal: kill, ExitStatus: event.StatusMemoryLimit}},
		{name: "a cap found after the tool was signalled keeps its signal", reason: event.EndPidsLimit, late: true, st: signaled(int(unix.SIGTERM)),
			want: agent.Result{Reason: event.EndPidsLimit, Detail: "d", ExitSignal: int(unix.SIGTERM), ExitStatus: 128 + int(unix.SIGTERM)}},
		{name: "a cap berm stopped a signalled tool for is berm's kill", reason: event.EndOutputLimit, st: signaled(kill),
			want: agent.Result{Reason: event.EndOutputLimit, Detail: "d", ExitSignal: kill, ExitStatus: event.StatusOutputLimit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detail := ""
			if tc.reason != "" {
				detail = "d"
			}
			got := endStatus(agent.Result{}, tc.reason, detail, tc.late, tc.st, errors.New("signal: killed"))
			if got.Reason != tc.want.Reason || got.Detail != tc.want.Detail || got.ExitCode != tc.want.ExitCode ||
				got.ExitSignal != tc.want.ExitSignal || got.ExitStatus != tc.want.ExitStatus {
				t.Errorf("got %s %q code %d signal %d status %d, want %s %q code %d signal %d status %d",
					got.Reason, got.Detail, got.ExitCode, got.ExitSignal, got.ExitStatus,
					tc.want.Reason, tc.want.Detail, tc.want.ExitCode, tc.want.ExitSignal, tc.want.ExitStatus)
			}
		})
	}
}
