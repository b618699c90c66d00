package probe

import (
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// need says what berm does with each probed feature: "required" (berm does not run calls
// without it), "optional: ..." (what is lost, and what covers it), or "unused: ..." (probed
// for the record; berm attaches something else).
var need = map[string]string{
	"btf":                "required: the tracer's programs are typed by it (CO-RE)",
	"ringbuf":            "required: every event of a call goes through it",
	"tp_btf":             "required: the tracer (ebpf-trace) attaches there",
	"raw_tp":             "unused: berm attaches tp_btf",
	"tracepoint":         "unused: berm attaches tp_btf",
	"kprobe":             "unused: berm attaches no kprobe",
	"fentry":             "unused: berm attaches no fentry program",
	"bpf_lsm":            "optional: BPF LSM repeats the call's file rules, which Landlock enforces; a policy is degraded without it only where Landlock's ABI lacks a right (the record says which). Its hooks also record the kernel's own path, device and inode of what unlink, rmdir, rename, mkdir, mknod, truncate and a failed exec act on: without it those paths are read from the tool's memory, and a rewrite is caught only while it is still there at the syscall's exit (" + PathViewExitReread + ")",
	"bpf_send_signal":    "optional: ends a call's process from the kernel on a fatal rule; seccomp's kill does without",
	"cgroup/connect4":    "required for calls with network access (spec.network): they are refused without it",
	"cgroup/connect6":    "required for calls with network access (spec.network): they are refused without it",
	"cgroup/sendmsg4":    "required for calls with network access (spec.network): they are refused without it",
	"cgroup/sendmsg6":    "required for calls with network access (spec.network): they are refused without it",
	"cgroup/sock_create": "required for calls with network access (spec.network): they are refused without it",
	"cgroup_skb/egress":  "unused: probed for the record",
	"landlock":           "required: the file system policy; berm refuses to run a call without it",
	"seccomp":            "required: the syscall policy",
	"cgroup2":            "required: each call's own cgroup",
	"controller/memory":  "required for memory caps",
	"controller/pids":    "required for process caps",
	"controller/cpu":     "required for CPU caps",
	"cgroup.kill":        "optional: ends a call's processes at once; berm kills them one by one without it",
}

// Need says whether berm needs a feature, and what for.
func Need(name string) string { return need[name] }

// How the trail knows the objects of path syscalls (unlink, rmdir, rename, mkdir, mknod,
// truncate, a failed exec), which a hostile tool can forge by rewriting the path's buffer
// from another thread while the kernel uses it.
const (
	// PathViewKernel: BPF LSM's hooks record the kernel's own path, device and inode of the
	// object; the record's path is the kernel's, and a tool's path naming another entry is
	// flagged (path_forged) and alerted.
	PathViewKernel = "the kernel's view (BPF LSM hooks: the object's own path, device and inode; path_forged)"
	// PathViewExitReread: only the tool's memory, read at the syscall's entry and again at its
	// exit; a rewrite undone before the exit goes unseen.
	PathViewExitReread = "the tool's memory only, read again at the syscall's exit (path_changed)"
)

// PathView says which of the two this kernel gives.
func (r *Report) PathView() string {
	if r.Has("bpf_lsm") {
		return PathViewKernel
	}
	return PathViewExitReread
}

// Cause says why the kernel refused a feature, from what can be checked (the kernel's build
// configuration, its lockdown, its active LSMs, its mounts), in place of the library's
// generic hint (its "MEMLOCK may be too low" follows every EPERM). "" when nothing explains
// it.
func (r *Report) Cause(f Feature) string {
	if f.OK {
		return ""
	}
	var causes []string
	switch f.Name {
	case "fentry", "bpf_lsm":
		cfg := kernelConfig()
		if cfg != nil && cfg["CONFIG_FUNCTION_TRACER"] == "" {
			causes = append(causes, "the kernel is built without CONFIG_FUNCTION_TRACER: no BPF trampolines, which fentry and BPF LSM programs need")
		}
		if lock := lockdown(); lock != "" && lock != "none" {
			causes = append(causes, "kernel lockdown is "+lock)
		}
		if f.Name == "bpf_lsm" {
			if lsms, err := securityFile("lsm"); err == nil && !strings.Contains(","+strings.TrimSpace(string(lsms))+",", ",bpf,") {
				causes = append(causes, "bpf is not among the active LSMs ("+strings.TrimSpace(string(lsms))+"): boot with lsm=...,bpf")
			} else if cfg != nil && cfg["CONFIG_BPF_LSM"] == "" {
				causes = append(causes, "the kernel is built without CONFIG_BPF_LSM")
			}
		}
		if len(causes) == 0 {
			causes = append(causes, "not found: the kernel's configuration, lockdown and active LSMs allow it")
		}
	case "tracepoint", "kprobe":
		if !mounted("tracefs") && !mounted("debugfs") {
			causes = append(causes, "neither tracefs nor debugfs is mounted (mount -t tracefs nodev /sys/kernel/tracing)")
		}
	}
	return strings.Join(causes, "; ")
}

// securityFile reads a file of securityfs: where it is mounted, or (root) from a mount of
// its own for the read, detached at once: a host without securityfs mounted still has a
// lockdown mode and active LSMs.
func securityFile(name string) ([]byte, error) {
	b, err := os.ReadFile("/sys/kernel/security/" + name)
	if err == nil || mounted("securityfs") {
		return b, err
	}
	dir, err := os.MkdirTemp("", "berm-securityfs-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	if err := unix.Mount("none", dir, "securityfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, err
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	return os.ReadFile(filepath.Join(dir, name))
}

func lockdown() string {
	b, err := securityFile("lockdown")
	if err != nil {
		return ""
	}
	s := string(b)
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j]
	}
	return strings.TrimSpace(s)
}

func mounted(fstype string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == fstype {
			return true
		}
	}
	return false
}

// kernelConfig reads the running kernel's build configuration (/proc/config.gz, or
// /boot/config-RELEASE); nil when neither is there.
func kernelConfig() map[string]string {
	var rd io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			rd = z
		}
	}
	if rd == nil {
		rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
		if err != nil {
			return nil
		}
		f, err := os.Open("/boot/config-" + strings.TrimSpace(string(rel)))
		if err != nil {
			return nil
		}
		defer f.Close()
		rd = f
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[k] = v
		}
	}
	return cfg
}
