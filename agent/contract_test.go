package agent

import (
	"os"
	"regexp"
	"strconv"
	"strings"
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
	for _, m := range regexp.MustCompile(`(?m)^#define (BERM_\w+) (0x[0-9a-f]+|\d+)`).FindAllStringSubmatch(readContract(t), -1) {
		n, _ := strconv.ParseInt(m[2], 0, 64)
		defines[m[1]] = int(n)
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
		{"BERM_MAX_SYSCALLS", len(bpf.WireBermAggmask{}.W) * 64, "berm_aggmask.w bits"},
		{"BERM_MAX_SYSCALLS", len(bpf.WireBermAggcounts{}.N), "berm_aggcounts.n"},
		{"BERM_MAX_SYSCALLS", len(bpf.WireBermAggcounts{}.Failed), "berm_aggcounts.failed"},
		{"BERM_CALL_AUDIT", tracer.CallAudit, "tracer.CallAudit"},
		{"BERM_CALL_SETUP", tracer.CallSetup, "tracer.CallSetup"},
		{"BERM_PATH_LEN", len(bpf.WireBermLsmDeny{}.Path), "berm_lsm_deny.path"},
		{"BERM_PATH_MAX", bpf.BermPathMax, "bpf.BermPathMax"},
		{"BERM_XG_ARGV_MAX", bpf.BermXgArgvMax, "bpf.BermXgArgvMax"},
		{"BERM_ARGS_MAX", bpf.BermArgsMax, "bpf.BermArgsMax"},
		{"BERM_EXE_PATH_MAX", bpf.BermExePathMax, "bpf.BermExePathMax"},
		{"BERM_ENV_MAX", bpf.BermEnvMax, "bpf.BermEnvMax"},
		{"BERM_LEN_UNKNOWN", wire.LenUnknown, "wire.LenUnknown"},
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

func mkHdr(op bpf.WireBermOp, size uintptr) bpf.WireBermHdr {
	h := bpf.WireBermHdr{TsNs: 1, CgroupId: 7, Slot: 1, Op: uint16(op), Size: uint16(size), Pid: 10, Tid: 11, Ppid: 9, Uid: 65534}
	setStr(h.Comm[:], "rm")
	return h
}

// variable builds a variable-size record: the struct, then the strings of its tail.
func variable[T any](v *T, hdr *bpf.WireBermHdr, op bpf.WireBermOp, strs ...string) []byte {
	size := int(unsafe.Sizeof(*v))
	for _, s := range strs {
		size += len(s)
	}
	*hdr = mkHdr(op, uintptr(size))
	b := append([]byte(nil), raw(v)...)
	for _, s := range strs {
		b = append(b, s...)
	}
	return b
}

func str(s string, full uint32) bpf.WireBermStr {
	return bpf.WireBermStr{Len: uint32(len(s)), Full: full}
}

func TestDecode(t *testing.T) {
	var ex bpf.WireBermExec
	args := "rm\x00-rf\x00temp\x00"
	ex.Filename, ex.Args = str("/usr/bin/rm", 11), str(args, uint32(len(args)))
	ex.ExeMode = 0o104755
	ex.ExeNlink = 1
	exRaw := variable(&ex, &ex.Hdr, bpf.WireBermOpBERM_OP_EXEC, "/usr/bin/rm", args)

	var op bpf.WireBermOpen
	op.Path, op.Base = str("temp/a", 6), str("/work", 5)
	op.Source = uint32(bpf.WireBermSourceBERM_SRC_USER)
	op.Ret = -13
	op.Flags = 0x241
	opRaw := variable(&op, &op.Hdr, bpf.WireBermOpBERM_OP_OPEN, "temp/a", "/work")

	var cut bpf.WireBermOpen
	long := strings.Repeat("a/", 2047) + "b" // 4095 bytes kept of 5000
	cut.Path = str(long, 5000)
	cut.Source = uint32(bpf.WireBermSourceBERM_SRC_USER)
	cut.Ret = -36
	cutRaw := variable(&cut, &cut.Hdr, bpf.WireBermOpBERM_OP_OPEN, long)

	var ko bpf.WireBermOpen
	ko.Path = str("/etc/passwd", 11)
	ko.Source = uint32(bpf.WireBermSourceBERM_SRC_KERNEL)
	ko.Ret = 3
	koRaw := variable(&ko, &ko.Hdr, bpf.WireBermOpBERM_OP_OPEN, "/etc/passwd")

	var co bpf.WireBermConnect
	co.Hdr = mkHdr(bpf.WireBermOpBERM_OP_CONNECT, unsafe.Sizeof(co))
	co.Family = 10
	co.Port = 443
	copy(co.Addr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 169, 254, 169, 254})
	co.Ret = -111
	co.Source = uint32(bpf.WireBermSourceBERM_SRC_USER)

	var ext bpf.WireBermExit
	ext.Hdr = mkHdr(bpf.WireBermOpBERM_OP_EXIT, unsafe.Sizeof(ext))
	ext.Code = 9 // killed by SIGKILL

	var sc bpf.WireBermSyscallPath
	sc.Sc.Nr = 263
	sc.Path = str("temp/b", 6)
	sc.Source = uint32(bpf.WireBermSourceBERM_SRC_USER)
	sc.Changed = uint32(bpf.WireBermChangedBERM_CHANGED_PATH)
	scRaw := variable(&sc, &sc.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "temp/b")

	var fd bpf.WireBermSyscallPath
	fd.Sc.Nr = 77
	fd.Path = str("/work/report.csv", 16)
	fd.Source = uint32(bpf.WireBermSourceBERM_SRC_KERNEL)
	fdRaw := variable(&fd, &fd.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "/work/report.csv")

	// The kernel's view (BPF LSM) beside the tool's memory: an unlink whose buffer said
	// d37/harmless while the kernel removed /work/precious (inode 42 on 8:1).
	kobj := func(path string, ino uint64) bpf.WireBermKobj {
		return bpf.WireBermKobj{Ino: ino, Dev: 8<<20 | 1, Seen: 1, Path: str(path, uint32(len(path)))}
	}
	var fu bpf.WireBermSyscallPath
	fu.Sc.Nr = 263
	fu.Path, fu.Source = str("d37/harmless", 12), uint32(bpf.WireBermSourceBERM_SRC_USER)
	fu.Kobj = kobj("/work/precious", 42)
	fuRaw := variable(&fu, &fu.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "d37/harmless", "/work/precious")
	// The same name through a symbolic link to the directory: not forged.
	var hu bpf.WireBermSyscallPath
	hu.Sc.Nr = 87
	hu.Path, hu.Source = str("link/precious/", 14), uint32(bpf.WireBermSourceBERM_SRC_USER)
	hu.Kobj = kobj("/work/real/precious", 42)
	huRaw := variable(&hu, &hu.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "link/precious/", "/work/real/precious")
	// A rename whose target the tool's memory named c while the kernel made b.
	var fr bpf.WireBermSyscallPath
	fr.Sc.Nr = 316
	fr.Path, fr.Path2 = str("a", 1), str("c", 1)
	fr.Source, fr.Source2 = uint32(bpf.WireBermSourceBERM_SRC_USER), uint32(bpf.WireBermSourceBERM_SRC_USER)
	fr.Kobj, fr.Kobj2 = kobj("/work/a", 7), kobj("/work/b", 0)
	frRaw := variable(&fr, &fr.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "a", "c", "/work/a", "/work/b")
	// truncate follows a final symlink: another name is no forgery.
	var tr bpf.WireBermSyscallPath
	tr.Sc.Nr = 76
	tr.Path, tr.Source = str("latest", 6), uint32(bpf.WireBermSourceBERM_SRC_USER)
	tr.Kobj = kobj("/work/log.3", 9)
	trRaw := variable(&tr, &tr.Sc.Hdr, bpf.WireBermOpBERM_OP_SYSCALL_PATH, "latest", "/work/log.3")

	var sp bpf.WireBermSyscall
	sp.Hdr = mkHdr(bpf.WireBermOpBERM_OP_SYSCALL, unsafe.Sizeof(sp))
	sp.Nr = 110
	sp.Ret = 1

	var nd bpf.WireBermNetDeny
	nd.Hdr = mkHdr(bpf.WireBermOpBERM_OP_NET_DENY, unsafe.Sizeof(nd))
	nd.Rule, nd.Family, nd.Port = 3, 2, 443
	copy(nd.Addr[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 93, 184, 216, 34})

	var ld bpf.WireBermLsmDeny
	ld.Hdr = mkHdr(bpf.WireBermOpBERM_OP_LSM_DENY, unsafe.Sizeof(ld))
	ld.Audit = 1
	setStr(ld.Path[:], "/etc/shadow")

	cases := []struct {
		name  string
		raw   []byte
		check func(*event.Event) bool
	}{
		{"exec", exRaw, func(e *event.Event) bool {
			return e.Kind == event.KindExec && e.Exec.Filename == "/usr/bin/rm" && len(e.Exec.Argv) == 3 &&
				e.Exec.Argv[2] == "temp" && e.Exec.Setuid && !e.Exec.Deleted && e.Comm == "rm" && e.UID == 65534 &&
				!e.Exec.Truncated && e.Exec.ArgsLen == uint32(len(args))
		}},
		{"open relative", opRaw, func(e *event.Event) bool {
			return e.Kind == event.KindOpen && e.Open.Path == "temp/a" && e.Open.Errno == "EACCES" && e.Open.Flags == 0x241 &&
				e.Open.PathSource == "user" && e.Open.ResolvedPath == "/work/temp/a" && !e.Open.PathTruncated
		}},
		{"open cut", cutRaw, func(e *event.Event) bool {
			return e.Open.Path == long && e.Open.PathTruncated && e.Open.PathLen == 5000 && e.Open.ResolvedPath == ""
		}},
		{"open kernel path", koRaw, func(e *event.Event) bool {
			return e.Open.Path == "/etc/passwd" && e.Open.PathSource == "kernel" && e.Open.Result == 3
		}},
		{"connect v4-mapped", raw(&co), func(e *event.Event) bool {
			return e.Kind == event.KindConnect && e.Connect.Family == "inet6" && e.Connect.Addr == "::ffff:169.254.169.254" &&
				e.Connect.Port == 443 && e.Connect.Errno == "ECONNREFUSED" && e.Connect.AddrSource == "user"
		}},
		{"exit by signal", raw(&ext), func(e *event.Event) bool { return e.Kind == event.KindExit && e.Exit.Signal == 9 }},
		{"syscall with path", scRaw, func(e *event.Event) bool {
			return e.Kind == event.KindSyscall && e.Syscall.Name == "unlinkat" && e.Syscall.Path == "temp/b" &&
				e.Syscall.PathSource == "user" && e.Syscall.PathChanged && !e.Syscall.Path2Changed
		}},
		{"syscall on an fd", fdRaw, func(e *event.Event) bool {
			return e.Syscall.Name == "ftruncate" && e.Syscall.Path == "/work/report.csv" && e.Syscall.PathSource == "kernel" &&
				!e.Syscall.PathChanged
		}},
		{"a forged unlink is the kernel's object", fuRaw, func(e *event.Event) bool {
			sc := e.Syscall
			return sc.Path == "/work/precious" && sc.PathSource == "kernel" && sc.ToolPath == "d37/harmless" &&
				sc.PathForged && sc.Dev == "8:1" && sc.Ino == 42 && !sc.Path2Forged && sc.Path2Source == ""
		}},
		{"an unlink through a linked directory is not forged", huRaw, func(e *event.Event) bool {
			sc := e.Syscall
			return sc.Path == "/work/real/precious" && sc.ToolPath == "link/precious/" && !sc.PathForged
		}},
		{"a rename's forged target", frRaw, func(e *event.Event) bool {
			sc := e.Syscall
			return sc.Path == "/work/a" && sc.Path2 == "/work/b" && sc.ToolPath2 == "c" && sc.Path2Source == "kernel" &&
				!sc.PathForged && sc.Path2Forged && sc.Ino == 7 && sc.Ino2 == 0 && sc.Dev2 == "8:1"
		}},
		{"truncate through a symlink is not forged", trRaw, func(e *event.Event) bool {
			sc := e.Syscall
			return sc.Path == "/work/log.3" && sc.ToolPath == "latest" && !sc.PathForged
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
			if err := wire.Decode(tc.raw, &ev); err != nil {
				t.Fatal(err)
			}
			if !tc.check(&ev) {
				t.Fatalf("decoded %+v", ev)
			}
		})
	}
}

func TestDecodeRejectsContractViolations(t *testing.T) {
	var op bpf.WireBermFork
	op.Hdr = mkHdr(bpf.WireBermOpBERM_OP_FORK, unsafe.Sizeof(op)-8)
	var fork bpf.WireBermFork
	fork.Hdr = mkHdr(bpf.WireBermOpBERM_OP_FORK, unsafe.Sizeof(fork))
	var short bpf.WireBermOpen
	short.Hdr = mkHdr(bpf.WireBermOpBERM_OP_OPEN, unsafe.Sizeof(short)-8)
	var past bpf.WireBermOpen
	past.Path = str("/etc/passwd", 11) // says 11 bytes of tail, carries 3
	pastRaw := variable(&past, &past.Hdr, bpf.WireBermOpBERM_OP_OPEN, "/et")
	var huge bpf.WireBermOpen
	huge.Hdr = mkHdr(bpf.WireBermOpBERM_OP_OPEN, unsafe.Sizeof(huge)+3*4096)
	cases := map[string][]byte{
		"short":                      make([]byte, 10),
		"unknown op":                 raw(&bpf.WireBermHdr{Op: 99, Size: 56}),
		"size mismatch":              raw(&op),
		"truncated body":             raw(&fork)[:wire.HdrSize+4],
		"variable under its struct":  raw(&short),
		"string past the record":     pastRaw,
		"variable over its max size": append(raw(&huge), make([]byte, 3*4096)...),
	}
	for name, b := range cases {
		var ev event.Event
		if err := wire.Decode(b, &ev); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}
