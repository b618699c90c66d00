// Package cgroup gives each tool call its own cgroup: a cgroup v2 leaf for identity (its
// inode is the id the eBPF programs key on), kill and freeze, and the memory, pids and cpu
// controllers wherever the host has them: on v2 itself, or on v1 hierarchies (hybrid hosts).
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Layout is where the host's cgroup hierarchies are.
type Layout struct {
	V2 string            // cgroup2 mount: /sys/fs/cgroup (pure v2) or /sys/fs/cgroup/unified (hybrid)
	V1 map[string]string // controller -> v1 mount, for memory, pids, cpu (hybrid hosts)
	// V2Controllers are the controllers available on the v2 hierarchy.
	V2Controllers []string
}

// Hybrid reports whether resource controllers live on v1.
func (l *Layout) Hybrid() bool { return len(l.V1) > 0 }

// Detect reads /proc/self/mountinfo.
func Detect() (*Layout, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	l := &Layout{V1: map[string]string{}}
	for _, line := range strings.Split(string(data), "\n") {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		parts := strings.SplitN(line, " - ", 2)
		if len(parts) != 2 {
			continue
		}
		pre, post := strings.Fields(parts[0]), strings.Fields(parts[1])
		if len(pre) < 5 || len(post) < 3 {
			continue
		}
		mnt := pre[4]
		switch post[0] {
		case "cgroup2":
			if l.V2 == "" || mnt == "/sys/fs/cgroup" {
				l.V2 = mnt
			}
		case "cgroup":
			for _, opt := range strings.Split(post[2], ",") {
				switch opt {
				case "memory", "pids", "cpu":
					if _, ok := l.V1[opt]; !ok {
						l.V1[opt] = mnt
					}
				}
			}
		}
	}
	if l.V2 == "" {
		return nil, errors.New("no cgroup2 hierarchy mounted: berm needs cgroup v2 for call identity (mount -t cgroup2 none /sys/fs/cgroup/unified)")
	}
	if ctl, err := os.ReadFile(filepath.Join(l.V2, "cgroup.controllers")); err == nil {
		l.V2Controllers = strings.Fields(string(ctl))
	}
	// A controller active on v1 cannot be used on v2; one missing from both is reported by
	// Create when a limit needs it.
	for c := range l.V1 {
		l.V2Controllers = remove(l.V2Controllers, c)
	}
	return l, nil
}

func remove(s []string, v string) []string {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func (l *Layout) v2Has(c string) bool {
	for _, x := range l.V2Controllers {
		if x == c {
			return true
		}
	}
	return false
}

// Limits are the caps enforced by the cgroup. Zero means "no cap" and is refused by the
// sandboxer's defaults, not here.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64
}

// Cgroup is one call's cgroup.
type Cgroup struct {
	ID   uint64            // cgroup v2 id (inode of the directory)
	V2   string            // v2 directory
	V1   map[string]string // controller -> v1 directory
	l    *Layout
	lims Limits
}

// Root is the berm subtree: <hierarchy>/berm/<tenant>/<call>.
const Root = "berm"

// Create makes the call's cgroups and applies the limits. On error nothing is left behind.
func Create(l *Layout, tenant, callID string, lim Limits) (_ *Cgroup, err error) {
	cg := &Cgroup{V1: map[string]string{}, l: l, lims: lim}
	defer func() {
		if err != nil {
			cg.Remove()
		}
	}()
	parent := filepath.Join(l.V2, Root, tenant)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
	}
	// On pure v2 the leaf's controllers must be enabled in every ancestor's subtree_control.
	var want []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if l.v2Has(c) {
			want = append(want, c)
		}
	}
	if len(want) > 0 {
		for _, dir := range []string{l.V2, filepath.Join(l.V2, Root), parent} {
			if err := enable(dir, want); err != nil {
				return nil, err
			}
		}
	}
	cg.V2 = filepath.Join(parent, callID)
	if err := os.Mkdir(cg.V2, 0o755); err != nil {
		dir := cg.V2
		cg.V2 = ""
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("call id %s of tenant %s is taken: %s exists (a call with this id runs, or its launcher died; call ids must be unique)", callID, tenant, dir)
		}
		return nil, fmt.Errorf("create cgroup for call %s: %w", callID, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(cg.V2, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", cg.V2, err)
	}
	cg.ID = st.Ino

	need := map[string]bool{"memory": lim.MemoryBytes > 0, "pids": lim.Pids > 0, "cpu": lim.CPUs > 0}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !need[c] {
			continue
		}
		if mnt, ok := l.V1[c]; ok {
			dir := filepath.Join(mnt, Root, tenant, callID)
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				return nil, fmt.Errorf("create v1 %s cgroup: %w", c, err)
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, fmt.Errorf("create v1 %s cgroup: %w", c, err)
			}
			cg.V1[c] = dir
		} else if !l.v2Has(c) {
			return nil, fmt.Errorf("%s limit requested but no %s controller on this host (neither v2 nor v1)", c, c)
		}
	}
	return cg, cg.apply()
}

func enable(dir string, ctls []string) error {
	cur, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s/cgroup.subtree_control: %w", dir, err)
	}
	have := strings.Fields(string(cur))
	var add []string
	for _, c := range ctls {
		found := false
		for _, h := range have {
			found = found || h == c
		}
		if !found {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0); err != nil {
		return fmt.Errorf("enable %v in %s: %w", add, dir, err)
	}
	return nil
}

func write(dir, file, val string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("set %s/%s = %s: %w", dir, file, val, err)
	}
	return nil
}

// SetLimits replaces the caps of a cgroup created ahead of its call (a warm sandbox's); caps
// already in place are not written again.
func (cg *Cgroup) SetLimits(lim Limits) error {
	if lim == cg.lims {
		return nil
	}
	for c, on := range map[string]bool{"memory": lim.MemoryBytes > 0, "pids": lim.Pids > 0, "cpu": lim.CPUs > 0} {
		if _, v1 := cg.l.V1[c]; on && v1 && cg.V1[c] == "" {
			return fmt.Errorf("%s cap: the cgroup was created without a v1 %s cgroup", c, c)
		}
	}
	cg.lims = lim
	return cg.apply()
}

func (cg *Cgroup) apply() error {
	lim := cg.lims
	if lim.MemoryBytes > 0 {
		if d, ok := cg.V1["memory"]; ok {
			// Swap would let a memory bomb outlive its cap; memsw may be absent without swap.
			// memsw may never be below the memory limit: raising a cap (a warm cgroup's) means
			// memsw first, lowering it means memsw last; trying both orders covers both.
			v := strconv.FormatInt(lim.MemoryBytes, 10)
			_ = write(d, "memory.memsw.limit_in_bytes", v)
			if err := write(d, "memory.limit_in_bytes", v); err != nil {
				return err
			}
			_ = write(d, "memory.memsw.limit_in_bytes", v)
			_ = write(d, "memory.swappiness", "0")
		} else {
			if err := write(cg.V2, "memory.max", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
				return err
			}
			_ = write(cg.V2, "memory.swap.max", "0")
			// Kill the whole call on OOM, not one process of it.
			_ = write(cg.V2, "memory.oom.group", "1")
		}
	}
	if lim.Pids > 0 {
		dir, file := cg.V2, "pids.max"
		if d, ok := cg.V1["pids"]; ok {
			dir = d
		}
		if err := write(dir, file, strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		const period = 100000
		quota := int64(lim.CPUs * period)
		if d, ok := cg.V1["cpu"]; ok {
			if err := write(d, "cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
				return err
			}
			if err := write(d, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)); err != nil {
				return err
			}
		} else if err := write(cg.V2, "cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
			return err
		}
	}
	return nil
}

// OpenFD opens the v2 directory for CLONE_INTO_CGROUP.
func (cg *Cgroup) OpenFD() (int, error) {
	fd, err := unix.Open(cg.V2, unix.O_DIRECTORY|unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", cg.V2, err)
	}
	return fd, nil
}

// JoinV1 moves pid into the call's v1 cgroups. On hybrid hosts the launcher does this before
// the sandbox's init lets the tool start.
func (cg *Cgroup) JoinV1(pid int) error {
	for c, d := range cg.V1 {
		if err := write(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("join v1 %s cgroup: %w", c, err)
		}
	}
	return nil
}

// Kill kills every process of the call (cgroup.kill), including ones that left the session,
// double-forked or are stopped.
func (cg *Cgroup) Kill() error { return Kill(cg.V2) }

// KillAndWait kills the call and waits until its cgroup is empty.
func (cg *Cgroup) KillAndWait(timeout time.Duration) error { return KillAndWait(cg.V2, timeout) }

// Kill kills every process in the cgroup v2 directory dir.
func Kill(dir string) error {
	if err := write(dir, "cgroup.kill", "1"); err != nil {
		return fmt.Errorf("kill call: %w", err)
	}
	return nil
}

// Populated reports whether any process is left in the cgroup v2 directory dir.
func Populated(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read cgroup.events: %w", err)
	}
	return bytes.Contains(data, []byte("populated 1")), nil
}

// KillAndWait kills every process in dir and waits until it is empty.
func KillAndWait(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pop, err := Populated(dir)
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		if err := Kill(dir); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("call cgroup %s still populated after %s", dir, timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Events are counters of cap hits.
type Events struct {
	OOMKills int64 // memory cap
	PidsMax  int64 // forks refused by the pids cap
}

// Events reads the cap-hit counters.
func (cg *Cgroup) Events() Events {
	var ev Events
	if d, ok := cg.V1["memory"]; ok {
		ev.OOMKills = keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
	} else if cg.lims.MemoryBytes > 0 {
		ev.OOMKills = keyed(filepath.Join(cg.V2, "memory.events"), "oom_kill")
	}
	if d, ok := cg.V1["pids"]; ok {
		ev.PidsMax = keyed(filepath.Join(d, "pids.events"), "max")
	} else if cg.lims.Pids > 0 {
		ev.PidsMax = keyed(filepath.Join(cg.V2, "pids.events"), "max")
	}
	return ev
}

// Stats are the call's resource use.
type Stats struct {
	CPUTimeNs  uint64
	PeakMemory uint64
}

// Stats reads CPU time (v2 cpu.stat exists on every v2 cgroup) and peak memory.
func (cg *Cgroup) Stats() Stats {
	var s Stats
	if us := keyed(filepath.Join(cg.V2, "cpu.stat"), "usage_usec"); us > 0 {
		s.CPUTimeNs = uint64(us) * 1000
	}
	if d, ok := cg.V1["memory"]; ok {
		s.PeakMemory = uint64(single(filepath.Join(d, "memory.max_usage_in_bytes")))
	} else {
		s.PeakMemory = uint64(single(filepath.Join(cg.V2, "memory.peak")))
	}
	return s
}

func keyed(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func single(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// Remove deletes the call's cgroups (they must be empty).
func (cg *Cgroup) Remove() error {
	var errs []error
	for c, d := range cg.V1 {
		if err := rmdir(d); err != nil {
			errs = append(errs, fmt.Errorf("remove v1 %s cgroup: %w", c, err))
		}
	}
	if cg.V2 != "" {
		if err := rmdir(cg.V2); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// rmdir retries briefly: a cgroup is busy for a moment after its last process was reaped.
func rmdir(d string) error {
	var err error
	for i := 0; i < 2000; i++ {
		err = unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(500 * time.Microsecond)
	}
	return err
}
