package agent

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"unsafe"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

func readContract(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../bpf/lib/berm.h")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// bpf/lib/berm.h is the one definition of the wire contract. Every op it declares must have
// a decoder registered by the package that owns it (the agent imports them all), and the
// decoders' sizes come from the types bpf2go generated out of it.
func TestContractCoversEveryOp(t *testing.T) {
	ops := regexp.MustCompile(`(?m)^\s*BERM_OP_(\w+)\s*=\s*(\d+),`).FindAllStringSubmatch(readContract(t), -1)
	if len(ops) == 0 {
		t.Fatal("no ops found in berm.h")
	}
	registered := wire.Ops()
	for _, m := range ops {
		n, _ := strconv.Atoi(m[2])
		if _, ok := registered[bpf.WireBermOp(n)]; !ok {
			t.Errorf("op BERM_OP_%s = %d has no decoder", m[1], n)
		}
	}
	if len(registered) != len(ops) {
		t.Errorf("decoders know %d ops, berm.h declares %d", len(registered), len(ops))
	}
	// The generated header must match what the C side writes in hdr.size.
	if wire.HdrSize != 56 {
		t.Errorf("struct berm_hdr is %d bytes in Go; the C layout (u64,u64,u32,u16,u16,u32*4,char[16]) is 56", wire.HdrSize)
	}
}

// The Go side's limits and the generated arrays must be berm.h's: a slot or syscall number
// the kernel cannot index, or a buffer of another length, breaks the contract silently.
func TestContractLimits(t *testing.T) {
	defines := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#define (BERM_\w+) (\d+)`).FindAllStringSubmatch(readContract(t), -1) {
		defines[m[1]], _ = strconv.Atoi(m[2])
	}
	cases := []struct {
		define string
		goSide int
		what   string
	}{
		{"BERM_MAX_SLOTS", tracer.MaxSlots, "tracer.MaxSlots"},
		{"BERM_MAX_SYSCALLS", tracer.MaxSyscalls, "tracer.MaxSyscalls"},
		{"BERM_MAX_SYSCALLS", len(bpf.WireBermSyscounts{}.N), "berm_syscounts.n"},
		{"BERM_MAX_SYSCALLS", len(bpf.WireBermCallCfg{}.SysMask) * 64, "berm_call_cfg.sys_mask bits"},
		{"BERM_CALL_AUDIT", tracer.CallAudit, "tracer.CallAudit"},
		{"BERM_PATH_LEN", len(bpf.WireBermOpen{}.Path), "berm_open.path"},
		{"BERM_ARGS_LEN", len(bpf.WireBermExec{}.Args), "berm_exec.args"},
	}
	for _, c := range cases {
		want, ok := defines[c.define]
		if !ok {
			t.Errorf("%s not found in berm.h", c.define)
			continue
		}
		if c.goSide != want {
			t.Errorf("%s = %d, berm.h %s = %d", c.what, c.goSide, c.define, want)
		}
	}
}

func raw[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

func setStr(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func hdr(op bpf.WireBermOp, size uintptr) bpf.WireBermHdr {
	h := bpf.WireBermHdr{TsNs: 1, CgroupId: 7, Slot: 1, Op: uint16(op), Size: uint16(size), Pid: 10, Tid: 11, Ppid: 9, Uid: 65534}
	setStr(h.Comm[:], "rm")
	return h
}

func TestDecode(t *testing.T) {
	var ex bpf.WireBermExec
	ex.Hdr = hdr(bpf.WireBermOpBERM_OP_EXEC, unsafe.Sizeof(ex))
	setStr(ex.Filename[:], "/usr/bin/rm")
	args := "rm\x00-rf\x00temp\x00"
	for i := range args {
		ex.Args[i] = int8(args[i])
	}
	ex.ArgsLen = uint32(len(args))
	ex.ExeMode = 0o104755
	ex.ExeNlink = 1

	var op bpf.WireBermOpen
	op.Hdr = hdr(bpf.WireBermOpBERM_OP_OPEN, unsafe.Sizeof(op))
	setStr(op.Path[:], "temp/a")
	op.Ret = -13
	op.Flags = 0x241

	var co bpf.WireBermConnect
	co.Hdr = hdr(bpf.WireBermOpBERM_OP_CONNECT, unsafe.Sizeof(co))
	co.Family = 10
	co.Port = 443
	copy(co.Addr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254})
	co.Ret = -111

	var ext bpf.WireBermExit
	ext.Hdr = hdr(bpf.WireBermOpBERM_OP_EXIT, unsafe.Sizeof(ext))
	ext.Code = 9 // killed by SIGKILL

	var sc bpf.WireBermSyscallPath
	sc.Sc.Hdr = hdr(bpf.WireBermOpBERM_OP_SYSCALL_PATH, unsafe.Sizeof(sc))
	sc.Sc.Nr = 263
	setStr(sc.Path[:], "temp/b")

	var sp bpf.WireBermSyscall
	sp.Hdr = hdr(bpf.WireBermOpBERM_OP_SYSCALL, unsafe.Sizeof(sp))
	sp.Nr = 110
	sp.Ret = 1

	var nd bpf.WireBermNetDeny
	nd.Hdr = hdr(bpf.WireBermOpBERM_OP_NET_DENY, unsafe.Sizeof(nd))
	nd.Rule, nd.Family, nd.Port = 3, 2, 443
	copy(nd.Addr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 93, 184, 216, 34})

	var ld bpf.WireBermLsmDeny
	ld.Hdr = hdr(bpf.WireBermOpBERM_OP_LSM_DENY, unsafe.Sizeof(ld))
	ld.Audit = 1
	setStr(ld.Path[:], "/etc/shadow")

	cases := []struct {
		name  string
		raw   []byte
		check func(*event.Event) bool
	}{
		{"exec", raw(&ex), func(e *event.Event) bool {
			return e.Kind == event.KindExec && e.Exec.Filename == "/usr/bin/rm" && len(e.Exec.Argv) == 3 &&
				e.Exec.Argv[2] == "temp" && e.Exec.Setuid && !e.Exec.Deleted && e.Comm == "rm" && e.UID == 65534
		}},
		{"open", raw(&op), func(e *event.Event) bool {
			return e.Kind == event.KindOpen && e.Open.Path == "temp/a" && e.Open.Errno == "EACCES" && e.Open.Flags == 0x241
		}},
		{"connect v4-mapped", raw(&co), func(e *event.Event) bool {
			return e.Kind == event.KindConnect && e.Connect.Family == "inet6" && e.Connect.Addr == "::ffff:169.254.169.254" &&
				e.Connect.Port == 443 && e.Connect.Errno == "ECONNREFUSED"
		}},
		{"exit by signal", raw(&ext), func(e *event.Event) bool { return e.Kind == event.KindExit && e.Exit.Signal == 9 }},
		{"syscall with path", raw(&sc), func(e *event.Event) bool {
			return e.Kind == event.KindSyscall && e.Syscall.Name == "unlinkat" && e.Syscall.Path == "temp/b"
		}},
		{"network denial", raw(&nd), func(e *event.Event) bool {
			return e.Kind == event.KindDenial && e.Denial.Layer == event.LayerCgroupSock &&
				e.Denial.Object == "93.184.216.34:443" && e.Denial.Rule == "rule-3" && !e.Denial.Audit
		}},
		{"lsm denial", raw(&ld), func(e *event.Event) bool {
			return e.Kind == event.KindDenial && e.Denial.Layer == event.LayerLSM &&
				e.Denial.Object == "/etc/shadow" && e.Denial.Rule == "default-deny" && e.Denial.Audit
		}},
		{"syscall", raw(&sp), func(e *event.Event) bool {
			return e.Kind == event.KindSyscall && e.Syscall.Name == "getppid" && e.Syscall.Result == 1 && e.Syscall.Path == ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ev event.Event
			if err := decode(tc.raw, &ev); err != nil {
				t.Fatal(err)
			}
			if !tc.check(&ev) {
				t.Fatalf("decoded %+v", ev)
			}
		})
	}
}

func TestDecodeRejectsContractViolations(t *testing.T) {
	var op bpf.WireBermOpen
	op.Hdr = hdr(bpf.WireBermOpBERM_OP_OPEN, unsafe.Sizeof(op)-8)
	cases := map[string][]byte{
		"short":          make([]byte, 10),
		"unknown op":     raw(&bpf.WireBermHdr{Op: 99, Size: 56}),
		"size mismatch":  raw(&op),
		"truncated body": raw(&op)[:100],
	}
	for name, b := range cases {
		var ev event.Event
		if err := decode(b, &ev); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}
