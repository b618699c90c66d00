// Package probe finds out what this kernel lets berm use, by trying it: each program type is
// loaded and attached for real (and detached at once), because a program type that loads may
// still fail to attach (no BPF trampolines, lockdown), and only the attach tells.
package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
)

// Cgroups is the host's cgroup layout as the launcher found it (the launcher owns cgroups;
// the probe only tries what berm would attach to them).
type Cgroups struct {
	V2            string            // cgroup2 mount
	V2Controllers []string          // controllers on the v2 hierarchy
	V1            map[string]string // controller -> v1 mount (hybrid hosts)
	Root          string            // berm's directory under V2, above every call
	Err           error             // why the layout could not be read
}

// Feature is one probed capability.
type Feature struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // ebpf-program, ebpf-map, ebpf-helper, kernel, cgroup
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report is the whole probe.
type Report struct {
	Kernel   string    `json:"kernel"`
	Features []Feature `json:"features"`
	// Layers are the observation and enforcement layers berm can use on this kernel.
	Layers []string `json:"layers"`
	// Missing are layers berm would use but this kernel refuses.
	Missing []string `json:"missing"`
}

// Has reports whether a named feature probed OK.
func (r *Report) Has(name string) bool {
	for _, f := range r.Features {
		if f.Name == name {
			return f.OK
		}
	}
	return false
}

func ret0() asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
}

func ret1() asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}
}

func loadAttach(spec *ebpf.ProgramSpec, attach func(*ebpf.Program) (link.Link, error)) error {
	spec.License = "GPL"
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer prog.Close()
	l, err := attach(prog)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return l.Close()
}

func feature(name, kind string, err error, okDetail string) Feature {
	if err != nil {
		// The library adds a MEMLOCK hint to every EPERM of a load: not the cause on a kernel
		// that accounts BPF memory to cgroups (5.11+); Cause says what is.
		return Feature{Name: name, Kind: kind, Detail: strings.Replace(err.Error(), " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", "", 1)}
	}
	return Feature{Name: name, Kind: kind, OK: true, Detail: okDetail}
}

// Run probes everything. It needs root for the eBPF and cgroup probes; without it they
// report the permission error.
func Run(cg Cgroups) *Report {
	r := &Report{}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	add := func(f Feature) { r.Features = append(r.Features, f) }

	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	add(feature("btf", "kernel", err, "/sys/kernel/btf/vmlinux"))
	if b, err := os.ReadFile("/sys/kernel/security/lockdown"); err == nil {
		add(Feature{Name: "lockdown", Kind: "kernel", OK: true, Detail: strings.TrimSpace(string(b))})
	}
	add(feature("ringbuf", "ebpf-map", features.HaveMapType(ebpf.RingBuf), ""))

	add(feature("tracepoint", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.TracePoint, Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) {
			return link.Tracepoint("syscalls", "sys_enter_getpid", p, nil)
		}), "syscalls:sys_enter_getpid"))
	add(feature("raw_tp", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) {
			return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: p})
		}), "sys_enter"))
	add(feature("tp_btf", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter", Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		}), "sys_enter"))
	add(feature("fentry", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "security_file_open", Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) { return link.AttachTracing(link.TracingOptions{Program: p}) }), "security_file_open"))
	add(feature("bpf_lsm", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.LSM, AttachType: ebpf.AttachLSMMac, AttachTo: "file_open", Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) { return link.AttachLSM(link.LSMOptions{Program: p}) }), "lsm/file_open"+lsmActive()))
	add(feature("kprobe", "ebpf-program", loadAttach(&ebpf.ProgramSpec{Type: ebpf.Kprobe, Instructions: ret0()},
		func(p *ebpf.Program) (link.Link, error) { return link.Kprobe("do_sys_openat2", p, nil) }), "do_sys_openat2"))
	add(feature("bpf_send_signal", "ebpf-helper", features.HaveProgramHelper(ebpf.TracePoint, asm.FnSendSignal), ""))

	r.Features = append(r.Features, probeCgroupHooks(cg)...)
	r.Features = append(r.Features, probeLandlock(), probeSeccomp())
	r.Features = append(r.Features, probeCgroups(cg)...)

	type layer struct {
		name string
		need []string
	}
	for _, l := range []layer{
		{event.LayerTrace, []string{"tp_btf", "ringbuf"}},
		{event.LayerCgroupSock, []string{"cgroup/connect4", "cgroup/connect6", "cgroup/sendmsg4", "cgroup/sendmsg6", "cgroup/sock_create"}},
		{event.LayerLandlock, []string{"landlock"}},
		{event.LayerSeccomp, []string{"seccomp"}},
		{event.LayerLSM, []string{"bpf_lsm"}},
	} {
		ok := true
		for _, n := range l.need {
			ok = ok && r.Has(n)
		}
		if ok {
			r.Layers = append(r.Layers, l.name)
		} else {
			r.Missing = append(r.Missing, l.name)
		}
	}
	return r
}

func lsmActive() string {
	b, err := os.ReadFile("/sys/kernel/security/lsm")
	if err != nil {
		return ""
	}
	return " (active LSMs: " + strings.TrimSpace(string(b)) + ")"
}

func probeCgroupHooks(cg Cgroups) []Feature {
	hooks := []struct {
		name string
		typ  ebpf.ProgramType
		at   ebpf.AttachType
	}{
		{"cgroup/connect4", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet4Connect},
		{"cgroup/connect6", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet6Connect},
		{"cgroup/sendmsg4", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP4Sendmsg},
		{"cgroup/sendmsg6", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP6Sendmsg},
		{"cgroup/sock_create", ebpf.CGroupSock, ebpf.AttachCGroupInetSockCreate},
		{"cgroup_skb/egress", ebpf.CGroupSKB, ebpf.AttachCGroupInetEgress},
	}
	var out []Feature
	err := cg.Err
	var dir string
	if err == nil {
		dir = filepath.Join(cg.Root, ".probe")
		if err = os.MkdirAll(dir, 0o755); err == nil {
			defer unix.Rmdir(dir)
		}
	}
	for _, h := range hooks {
		if err != nil {
			out = append(out, feature(h.name, "ebpf-program", err, ""))
			continue
		}
		e := loadAttach(&ebpf.ProgramSpec{Type: h.typ, AttachType: h.at, Instructions: ret1()},
			func(p *ebpf.Program) (link.Link, error) {
				return link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: h.at, Program: p})
			})
		out = append(out, feature(h.name, "ebpf-program", e, ""))
	}
	return out
}

const landlockCreateRulesetVersion = 1

func probeLandlock() Feature {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, landlockCreateRulesetVersion)
	if errno != 0 {
		return Feature{Name: "landlock", Kind: "kernel", Detail: errno.Error()}
	}
	return Feature{Name: "landlock", Kind: "kernel", OK: true, Detail: fmt.Sprintf("ABI %d", abi)}
}

func probeSeccomp() Feature {
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return Feature{Name: "seccomp", Kind: "kernel", Detail: err.Error()}
	}
	var avail []string
	for _, a := range []struct {
		name string
		act  uint32
	}{{"kill_process", unix.SECCOMP_RET_KILL_PROCESS}, {"errno", unix.SECCOMP_RET_ERRNO}, {"user_notif", unix.SECCOMP_RET_USER_NOTIF},
		{"trace", unix.SECCOMP_RET_TRACE}, {"log", unix.SECCOMP_RET_LOG}} {
		act := a.act
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&act))); e == 0 {
			avail = append(avail, a.name)
		}
	}
	return Feature{Name: "seccomp", Kind: "kernel", OK: true, Detail: "actions: " + strings.Join(avail, ",")}
}

func probeCgroups(l Cgroups) []Feature {
	if err := l.Err; err != nil {
		return []Feature{{Name: "cgroup2", Kind: "cgroup", Detail: err.Error()}}
	}
	out := []Feature{{Name: "cgroup2", Kind: "cgroup", OK: true, Detail: l.V2 + " controllers: " + strings.Join(l.V2Controllers, ",")}}
	for _, c := range []string{"memory", "pids", "cpu"} {
		switch {
		case l.V1[c] != "":
			out = append(out, Feature{Name: "controller/" + c, Kind: "cgroup", OK: true, Detail: "v1 at " + l.V1[c]})
		case contains(l.V2Controllers, c):
			out = append(out, Feature{Name: "controller/" + c, Kind: "cgroup", OK: true, Detail: "v2"})
		default:
			out = append(out, Feature{Name: "controller/" + c, Kind: "cgroup", Detail: "not available"})
		}
	}
	_, kerr := os.Stat(filepath.Join(l.V2, "cgroup.kill"))
	if kerr != nil {
		// The root has no cgroup.kill; any child does if the kernel supports it.
		dir := filepath.Join(l.Root, ".probe-kill")
		_, kerr = os.Stat(filepath.Join(dir, "cgroup.kill"))
		if os.MkdirAll(dir, 0o755) == nil {
			_, kerr = os.Stat(filepath.Join(dir, "cgroup.kill"))
			unix.Rmdir(dir)
		}
	}
	out = append(out, feature("cgroup.kill", "cgroup", kerr, ""))
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
