package agent

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"unsafe"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/bpf"
)

// bpf/lib/berm.h is the one definition of the wire contract. Every op it declares must have
// a decoder here, and the decoder's sizes come from the types bpf2go generated out of it.
func TestContractCoversEveryOp(t *testing.T) {
	src, err := os.ReadFile("../bpf/lib/berm.h")
	if err != nil {
		t.Fatal(err)
	}
	ops := regexp.MustCompile(`(?m)^\s*BERM_OP_(\w+)\s*=\s*(\d+),`).FindAllStringSubmatch(string(src), -1)
	if len(ops) == 0 {
		t.Fatal("no ops found in berm.h")
	}
	for _, m := range ops {
		n, _ := strconv.Atoi(m[2])
		if _, ok := wireSizes[bpf.ProcessBermOp(n)]; !ok {
			t.Errorf("op BERM_OP_%s = %d has no decoder", m[1], n)
		}
	}
	if len(wireSizes) != len(ops) {
		t.Errorf("decoder knows %d ops, berm.h declares %d", len(wireSizes), len(ops))
	}
	// The generated header must match what the C side writes in hdr.size.
	if hdrSize != 56 {
		t.Errorf("struct berm_hdr is %d bytes in Go; the C layout (u64,u64,u32,u16,u16,u32*4,char[16]) is 56", hdrSize)
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

func hdr(op bpf.ProcessBermOp, size uintptr) bpf.ProcessBermHdr {
	h := bpf.ProcessBermHdr{TsNs: 1, CgroupId: 7, Slot: 1, Op: uint16(op), Size: uint16(size), Pid: 10, Tid: 11, Ppid: 9, Uid: 65534}
	setStr(h.Comm[:], "rm")
	return h
}

func TestDecode(t *testing.T) {
	var ex bpf.ProcessBermExec
	ex.Hdr = hdr(bpf.ProcessBermOpBERM_OP_EXEC, unsafe.Sizeof(ex))
	setStr(ex.Filename[:], "/usr/bin/rm")
	args := "rm\x00-rf\x00temp\x00"
	for i := range args {
		ex.Args[i] = int8(args[i])
	}
	ex.ArgsLen = uint32(len(args))
	ex.ExeMode = 0o104755
	ex.ExeNlink = 1

	var op bpf.ProcessBermOpen
	op.Hdr = hdr(bpf.ProcessBermOpBERM_OP_OPEN, unsafe.Sizeof(op))
	setStr(op.Path[:], "temp/a")
	op.Ret = -13
	op.Flags = 0x241

	var co bpf.ProcessBermConnect
	co.Hdr = hdr(bpf.ProcessBermOpBERM_OP_CONNECT, unsafe.Sizeof(co))
	co.Family = 10
	co.Port = 443
	copy(co.Addr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254})
	co.Ret = -111

	var ext bpf.ProcessBermExit
	ext.Hdr = hdr(bpf.ProcessBermOpBERM_OP_EXIT, unsafe.Sizeof(ext))
	ext.Code = 9 // killed by SIGKILL

	var sc bpf.ProcessBermSyscallPath
	sc.Sc.Hdr = hdr(bpf.ProcessBermOpBERM_OP_SYSCALL_PATH, unsafe.Sizeof(sc))
	sc.Sc.Nr = 263
	setStr(sc.Path[:], "temp/b")

	var sp bpf.ProcessBermSyscall
	sp.Hdr = hdr(bpf.ProcessBermOpBERM_OP_SYSCALL, unsafe.Sizeof(sp))
	sp.Nr = 110
	sp.Ret = 1

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
	var op bpf.ProcessBermOpen
	op.Hdr = hdr(bpf.ProcessBermOpBERM_OP_OPEN, unsafe.Sizeof(op)-8)
	cases := map[string][]byte{
		"short":          make([]byte, 10),
		"unknown op":     raw(&bpf.ProcessBermHdr{Op: 99, Size: 56}),
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
