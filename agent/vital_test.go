package agent

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/testenv/testutil"
)

// record is a raw record of op, its result ret where the op has one.
func record(op bpf.WireBermOp, ret int64, flags uint32) []byte {
	raw := make([]byte, unsafe.Sizeof(bpf.WireBermSyscallPath{})+unsafe.Sizeof(bpf.WireBermOpen{}))
	h, _ := wire.Header(raw)
	h.Op = uint16(op)
	switch op {
	case bpf.WireBermOpBERM_OP_OPEN:
		o, _ := wire.As[bpf.WireBermOpen](raw)
		o.Ret, o.Flags = ret, flags
	case bpf.WireBermOpBERM_OP_SYSCALL:
		s, _ := wire.As[bpf.WireBermSyscall](raw)
		s.Ret = ret
	case bpf.WireBermOpBERM_OP_SYSCALL_PATH:
		s, _ := wire.As[bpf.WireBermSyscallPath](raw)
		s.Sc.Ret = ret
	}
	return raw
}

func TestVitalRecordsAreWhatAnIncidentIsMadeOf(t *testing.T) {
	enoent, eacces, eloop := -int64(unix.ENOENT), -int64(unix.EACCES), -int64(unix.ELOOP)
	cases := []struct {
		name string
		raw  []byte
		want bool
	}{
		{"an exec", record(bpf.WireBermOpBERM_OP_EXEC, 0, 0), true},
		{"an exec's environment", record(bpf.WireBermOpBERM_OP_EXEC_ENV, 0, 0), true},
		{"a gated exec killed", record(bpf.WireBermOpBERM_OP_EXEC_DENY, 0, 0), true},
		{"a connect", record(bpf.WireBermOpBERM_OP_CONNECT, enoent, 0), true},
		{"a network denial", record(bpf.WireBermOpBERM_OP_NET_DENY, 0, 0), true},
		{"a file denial", record(bpf.WireBermOpBERM_OP_LSM_DENY, 0, 0), true},
		{"an unlink that worked", record(bpf.WireBermOpBERM_OP_SYSCALL_PATH, 0, 0), true},
		{"an unlink refused", record(bpf.WireBermOpBERM_OP_SYSCALL_PATH, eacces, 0), true},
		{"an open for writing", record(bpf.WireBermOpBERM_OP_OPEN, 3, unix.O_WRONLY|unix.O_CREAT), true},
		{"an open refused", record(bpf.WireBermOpBERM_OP_OPEN, eacces, 0), true},
		{"a syscall refused", record(bpf.WireBermOpBERM_OP_SYSCALL, -int64(unix.EPERM), 0), true},
		{"an open of a file not there", record(bpf.WireBermOpBERM_OP_OPEN, enoent, 0), false},
		{"an open through a symlink loop", record(bpf.WireBermOpBERM_OP_OPEN, eloop, 0), false},
		{"an open for reading", record(bpf.WireBermOpBERM_OP_OPEN, 3, unix.O_RDONLY), false},
		{"an unlink of a file not there", record(bpf.WireBermOpBERM_OP_SYSCALL_PATH, enoent, 0), false},
		{"a syscall that worked", record(bpf.WireBermOpBERM_OP_SYSCALL, 0, 0), false},
		{"a fork", record(bpf.WireBermOpBERM_OP_FORK, 0, 0), false},
		{"a record too short for its header", []byte{1, 2, 3}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := vital(tc.raw); got != tc.want {
				t.Errorf("vital = %v, want %v", got, tc.want)
			}
		})
	}
}

// A call whose queue cheap noise has filled to its share still queues what an incident is
// made of: an exec, a deletion that worked, an event made in user space (a credential or
// approval event); the noise beside them is dropped and counted against the call.
func TestNoiseCannotTakeTheVitalShare(t *testing.T) {
	noise := record(bpf.WireBermOpBERM_OP_OPEN, -int64(unix.ELOOP), 0)
	a := &Agent{m: newMetrics(nil, func() float64 { return 0 }, 1)}
	c := &Call{slot: 1}
	c.worker.init()
	for range inboxBatches {
		b := &batch{}
		for range 4 {
			b.add(noise)
		}
		a.route(c, b)
	}
	if len(c.in) != noiseBatches {
		t.Fatalf("noise took %d of %d batches, want its share %d", len(c.in), inboxBatches, noiseBatches)
	}
	dropped := a.userDrops[1].Load()
	if dropped != (inboxBatches-noiseBatches)*4 {
		t.Fatalf("%d noise records dropped, want %d", dropped, (inboxBatches-noiseBatches)*4)
	}
	b := &batch{user: &event.Event{Kind: event.KindCredential}}
	b.add(noise)
	b.add(record(bpf.WireBermOpBERM_OP_EXEC, 0, 0))
	b.add(noise)
	b.add(record(bpf.WireBermOpBERM_OP_SYSCALL_PATH, 0, 0))
	routed := c.routed
	a.route(c, b)
	if c.routed != routed+3 {
		t.Fatalf("past the noise share, %d of the batch's 3 vital events queued", c.routed-routed)
	}
	if got := a.userDrops[1].Load() - dropped; got != 2 {
		t.Errorf("%d of the batch's 2 noise records counted as dropped", got)
	}
	for range noiseBatches {
		<-c.in
	}
	last := <-c.in
	if last.user == nil || len(last.ends) != 2 || !bytes.Equal(last.buf[:last.ends[0]], record(bpf.WireBermOpBERM_OP_EXEC, 0, 0)) {
		t.Errorf("the queued batch holds %d records (user event %v), want the exec and the deletion", len(last.ends), last.user != nil)
	}
}

// A call's end drains its queue for as long as its worker makes progress, however long that
// is; it gives up on a worker that finished no event in a whole idle period, or at the
// ceiling.
func TestEndDrainsWhileTheWorkerAdvances(t *testing.T) {
	cases := []struct {
		name    string
		ticks   int  // idle periods the drain takes
		advance bool // the worker finishes events in each
		ceiling bool // the ceiling comes first
		wantErr bool
	}{
		{"a long drain that advances", 100, true, false, false},
		{"a worker stuck in one event", 3, false, false, true},
		{"past the ceiling", 100, true, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			tick, ceiling := make(chan time.Time), make(chan time.Time, 1)
			var progress atomic.Uint64
			errc := make(chan error, 1)
			read := make(chan struct{}) // each read of the progress, done
			load := func() uint64 {
				v := progress.Load()
				read <- struct{}{}
				return v
			}
			go func() { errc <- drainWait(done, load, tick, ceiling, time.Second, time.Minute) }()
			<-read
			for i := 0; i < tc.ticks; i++ {
				if tc.advance {
					progress.Add(1)
				}
				if tc.ceiling && i == tc.ticks/2 {
					ceiling <- time.Time{}
					break
				}
				select {
				case tick <- time.Time{}:
					<-read
				case err := <-errc:
					if !tc.wantErr {
						t.Fatalf("gave up after %d of %d idle periods: %v", i, tc.ticks, err)
					}
					return
				}
			}
			close(done)
			err := <-errc
			if (err != nil) != tc.wantErr {
				t.Fatalf("drain: %v, want an error %v", err, tc.wantErr)
			}
		})
	}
}

// The kernel keeps the ring's last quarter for vital records, classified at the emit site by
// the contract's berm_vital (bpf/lib/berm.h); the agent's queue keeps a share for them by
// vitalOp. The two are one classification: every op (and one past the last), every class of
// result and every open flag that matters, run through the kernel's (the contract object's
// berm_vital_of, by BPF_PROG_TEST_RUN) and the agent's, give the same answer.
func TestTheKernelAndTheAgentAgreeOnWhatIsVital(t *testing.T) {
	testutil.RequireRoot(t, "loads the contract's classification into the kernel")
	spec, err := bpf.LoadWire()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(spec.Programs[bpf.WireProgBermVitalOf])
	if err != nil {
		t.Fatalf("load berm_vital_of: %v", err)
	}
	defer prog.Close()
	rets := []int64{0, 3, 1 << 40, -int64(unix.EPERM), -int64(unix.EACCES), -int64(unix.ENOENT), -int64(unix.ELOOP),
		-int64(unix.EINPROGRESS), -int64(unix.ENAMETOOLONG), -int64(unix.EEXIST), -1 << 63}
	flags := []uint32{0, unix.O_WRONLY, unix.O_RDWR, unix.O_CREAT, unix.O_TRUNC, unix.O_APPEND, unix.O_EXCL,
		unix.O_DIRECTORY | unix.O_CLOEXEC, unix.O_PATH, unix.O_NOFOLLOW | unix.O_NONBLOCK, unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC}
	var vitals, all int
	for op := uint16(0); op <= uint16(bpf.WireBermOpBERM_OP_EXEC_DENY)+1; op++ {
		for _, ret := range rets {
			for _, fl := range flags {
				args := bpf.WireBermVitalArgs{Ret: ret, Op: uint32(op), Flags: fl}
				got, err := prog.Run(&ebpf.RunOptions{Context: args})
				if err != nil {
					t.Fatalf("run berm_vital_of: %v", err)
				}
				all++
				if vitalOp(op, ret, fl) {
					vitals++
				}
				if kernel, agent := got != 0, vitalOp(op, ret, fl); kernel != agent {
					t.Errorf("op %d, result %d, flags %#o: the kernel says vital %v, the agent %v", op, ret, fl, kernel, agent)
				}
			}
		}
	}
	t.Logf("%d of %d classes of record vital", vitals, all)
}
