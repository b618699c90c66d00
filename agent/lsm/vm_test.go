package lsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/testenv/testutil"
)

// The TestVM tests need a kernel with BPF LSM active: testenv/qemu boots one and runs them
// (its /init sets BERM_IN_VM=1). They enforce a compiled policy on a real child process in
// its own cgroup and check both what the kernel allowed and the denials it reported.
const (
	vmEnv     = "BERM_IN_VM"
	childName = "lsm"
)

// op is one thing the child tries; deny says the policy refuses it.
type op struct {
	Name, Kind, Path, Path2 string
	deny                    bool
}

func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv(vmEnv) != "1" {
		t.Skip("needs a kernel with BPF LSM active: runs in the testenv/qemu VM (go test ./testenv/qemu), which sets " + vmEnv + "=1")
	}
}

func TestVMEnforce(t *testing.T) { runVM(t, false) }

func TestVMAudit(t *testing.T) { runVM(t, true) }

func runVM(t *testing.T, audit bool) {
	requireVM(t)
	base := t.TempDir()
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the VM has /bin/busybox: %v", err)
	}
	for _, d := range []string{"etc/sub", "etc/private", "secret", "opt", "ws/d2", "tmp", "tools"} {
		must(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for f, data := range map[string][]byte{
		"etc/conf": []byte("conf"), "etc/protected1": nil, "etc/protected2": nil, "etc/private/key": nil,
		"secret/key": nil, "ws/old": nil,
	} {
		must(t, os.WriteFile(filepath.Join(base, f), data, 0o644))
	}
	for _, f := range []string{"opt/tool", "ws/busybox"} {
		must(t, os.WriteFile(filepath.Join(base, f), busybox, 0o755))
	}

	mode := "enforce"
	if audit {
		mode = "audit"
	}
	c := compile(t, base, mode)
	rules := FromLandlock(c.Landlock, uint32(len(c.Rules)))
	for _, r := range rules {
		t.Logf("rule %d: %s %v", r.ID, r.Path, r.Rights)
	}

	tr, err := tracer.New(tracer.DefaultConfig)
	if err != nil {
		t.Fatalf("tracer: %v", err)
	}
	defer tr.Close()
	l, err := New(tr.Shared())
	if err != nil {
		t.Fatalf("lsm: %v", err)
	}
	defer l.Close()
	rd, err := ringbuf.NewReader(tr.Events())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	cg := filepath.Join("/sys/fs/cgroup", "berm-lsm-"+mode)
	must(t, os.Mkdir(cg, 0o755))
	defer os.Remove(cg)
	var st unix.Stat_t
	must(t, unix.Stat(cg, &st))
	cgid := st.Ino
	cgfd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(cgfd)

	must(t, tr.Register(cgid, tracer.CallConfig{Slot: 7, Audit: audit}))
	defer tr.Unregister(cgid)
	must(t, l.SetPolicy(cgid, rules...))
	defer l.Remove(cgid)

	b := func(p string) string { return filepath.Join(base, p) }
	ops := []op{
		{Name: "read granted", Kind: "read", Path: b("etc/conf")},
		{Name: "list workspace", Kind: "readdir", Path: b("ws")},
		{Name: "exec granted", Kind: "exec", Path: "/bin/busybox"},
		{Name: "create in workspace", Kind: "create", Path: b("ws/new")},
		{Name: "write in workspace", Kind: "write", Path: b("ws/old")},
		{Name: "truncate in workspace", Kind: "truncate", Path: b("ws/old")},
		{Name: "mkdir in workspace", Kind: "mkdir", Path: b("ws/d")},
		{Name: "rmdir in workspace", Kind: "rmdir", Path: b("ws/d2")},
		{Name: "rename in workspace", Kind: "rename", Path: b("ws/new"), Path2: b("ws/renamed")},
		{Name: "unlink in workspace", Kind: "unlink", Path: b("ws/renamed")},

		{Name: "read outside the grants", Kind: "read", Path: b("secret/key"), deny: true},
		{Name: "read a carved-out path", Kind: "read", Path: b("etc/private/key"), deny: true},
		{Name: "write a read-only file", Kind: "write", Path: b("etc/conf"), deny: true},
		{Name: "truncate a read-only file", Kind: "truncate", Path: b("etc/conf"), deny: true},
		{Name: "create outside the workspace", Kind: "create", Path: b("etc/new"), deny: true},
		{Name: "mkdir outside the workspace", Kind: "mkdir", Path: b("etc/newdir"), deny: true},
		{Name: "exec a binary not granted", Kind: "exec", Path: b("opt/tool"), deny: true},
		{Name: "exec a copy placed in the workspace", Kind: "exec", Path: b("ws/busybox"), deny: true},
		{Name: "unlink in a protected dir", Kind: "unlink", Path: b("etc/protected1"), deny: true},
		{Name: "rmdir in a protected dir", Kind: "rmdir", Path: b("etc/sub"), deny: true},
		{Name: "rename out of a protected dir", Kind: "rename", Path: b("etc/protected2"), Path2: b("ws/stolen"), deny: true},
	}
	results := runChild(t, cgfd, ops)

	denials := map[string][]bpf.WireBermLsmDeny{}
	rd.SetDeadline(time.Now())
	for {
		rec, err := rd.Read()
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read events: %v", err)
			}
			break
		}
		var h bpf.WireBermHdr
		must(t, binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &h))
		if h.CgroupId != cgid || h.Op != uint16(bpf.WireBermOpBERM_OP_LSM_DENY) {
			continue
		}
		var d bpf.WireBermLsmDeny
		must(t, binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &d))
		path := cstring(d.Path[:])
		denials[path] = append(denials[path], d)
		t.Logf("denial: rule %d audit %d pid %d comm %s path %s", d.Rule, d.Audit, d.Hdr.Pid,
			cstring(d.Hdr.Comm[:]), path)
	}
	if n, err := tr.TakeDrops(7); err != nil || n.Total() != 0 {
		t.Errorf("events lost in the kernel: %+v (%v)", n, err)
	}

	for _, o := range ops {
		got := results[o.Name]
		want := ""
		if o.deny && !audit {
			want = "EPERM"
		}
		if got != want {
			t.Errorf("%s (%s %s): result %q, want %q", o.Name, o.Kind, o.Path, got, orOK(want))
		}
		ds := denials[o.Path]
		if !o.deny {
			continue
		}
		if len(ds) == 0 {
			t.Errorf("%s (%s %s): no denial reported", o.Name, o.Kind, o.Path)
			continue
		}
		d := ds[0]
		if wantRule := nearestRule(rules, deciding(o)); d.Rule != wantRule {
			t.Errorf("%s: denial names rule %d, want %d", o.Name, d.Rule, wantRule)
		}
		if wantAudit := map[bool]uint32{false: 0, true: 1}[audit]; d.Audit != wantAudit {
			t.Errorf("%s: denial audit=%d, want %d", o.Name, d.Audit, wantAudit)
		}
	}
	// Nothing the policy allows may be reported: the allowed operations' objects are all in
	// the workspace or granted, and none is the object of a denied one.
	denied := map[string]bool{}
	for _, o := range ops {
		if o.deny {
			denied[o.Path] = true
		}
	}
	for _, o := range ops {
		if !o.deny && !denied[o.Path] && len(denials[o.Path]) > 0 {
			t.Errorf("%s (%s %s): allowed, yet reported as denied", o.Name, o.Kind, o.Path)
		}
	}
}

// deciding is the object whose rule decides: the file for opens and exec, the directory for
// entries made or removed.
func deciding(o op) string {
	switch o.Kind {
	case "read", "write", "truncate", "exec", "readdir":
		return o.Path
	}
	return filepath.Dir(o.Path)
}

// nearestRule is the rule the kernel must find walking up from path (0: none).
func nearestRule(rules []Rule, path string) uint32 {
	var best Rule
	for _, r := range rules {
		if within(path, r.Path) && len(r.Path) >= len(best.Path) {
			best = r
		}
	}
	return best.ID
}

func runChild(t *testing.T, cgfd int, ops []op) map[string]string {
	t.Helper()
	cmd := testutil.JSONCommand(t, childName, ops)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
	results := map[string]string{}
	if ee := testutil.RunJSON(t, cmd, &results); ee != nil {
		t.Fatalf("child: %v\nstderr: %s", ee, ee.Stderr)
	}
	return results
}

// child runs in the call's cgroup and reports each operation's errno name ("" when it worked).
// op's fields are exported for this; deny stays with the parent.
func child(ops []op) map[string]string {
	results := map[string]string{}
	for _, o := range ops {
		results[o.Name] = testutil.ErrnoName(do(o))
	}
	return results
}

func do(o op) error {
	switch o.Kind {
	case "read", "write":
		flags := unix.O_RDONLY
		if o.Kind == "write" {
			flags = unix.O_WRONLY
		}
		fd, err := unix.Open(o.Path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	case "readdir":
		_, err := os.ReadDir(o.Path)
		return err
	case "create":
		fd, err := unix.Open(o.Path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	case "truncate":
		return unix.Truncate(o.Path, 0)
	case "mkdir":
		return unix.Mkdir(o.Path, 0o755)
	case "rmdir":
		return unix.Rmdir(o.Path)
	case "unlink":
		return unix.Unlink(o.Path)
	case "rename":
		return unix.Rename(o.Path, o.Path2)
	case "exec":
		pid, err := syscall.ForkExec(o.Path, []string{"busybox", "true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
		if err != nil {
			return err
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			return err
		}
		if ws.ExitStatus() != 0 {
			return fmt.Errorf("exit status %d", ws.ExitStatus())
		}
		return nil
	}
	return fmt.Errorf("unknown op %q", o.Kind)
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

func cstring(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
