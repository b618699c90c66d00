package policy

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy/landlock"
)

// fsTree builds:
//
//	root/ws/sub/            the workspace, with inner -> sub and escape -> ../sys
//	root/tmp/
//	root/sys/a/{x,y}  root/sys/b.txt  root/sys/secret/k  root/sys/link -> a
//	root/syslink -> sys
func fsTree(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ws/sub", "tmp", "sys/a/x", "sys/a/y", "sys/secret"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"sys/b.txt", "sys/secret/k"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"ws/inner": "sub", "ws/escape": "../sys", "sys/link": "a", "syslink": "sys"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func fsPolicy(t *testing.T, root, fsYAML string) *Policy {
	t.Helper()
	y := header + "spec:\n  filesystem:\n" + strings.ReplaceAll(fsYAML, "ROOT", root)
	p, err := Parse("p.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompileFilesystem(t *testing.T) {
	root := fsTree(t)
	rw := writeAccess & landlock.FSRights(landlock.MaxABI)
	type rule struct {
		path   string
		access uint64
	}
	for _, tc := range []struct {
		name    string
		fs      string
		abi     int
		mounts  string
		want    []rule
		skipped []string
		err     string
	}{
		{name: "grants", fs: `    read: [ROOT/sys]
    write: ["${WORKSPACE}", "${TMP}"]
    exec: [ROOT/sys/a]
    deny: []
`, want: []rule{{"ROOT/sys", readAccess}, {"ROOT/sys/a", execAccess}, {"ROOT/tmp", rw}, {"ROOT/ws", rw}}},
		{name: "file rule carries file rights only", fs: "    read: []\n    write: [ROOT/sys/b.txt]\n    exec: []\n    deny: []\n",
			want: []rule{{"ROOT/sys/b.txt", rw & landlock.FileRights}}},
		{name: "symlink inside the workspace resolves", fs: "    read: []\n    write: [\"${WORKSPACE}/inner\"]\n    exec: []\n    deny: []\n",
			want: []rule{{"ROOT/ws/sub", rw}}},
		{name: "symlink out of the workspace refused", fs: "    read: [\"${WORKSPACE}/escape\"]\n    write: []\n    exec: []\n    deny: []\n",
			err: `p.yaml:7:12: spec.filesystem.read[0]: ${WORKSPACE}/escape resolves to ROOT/sys, outside ${WORKSPACE}, through a symlink`},
		{name: "writable system path through a symlink refused", fs: "    read: []\n    write: [ROOT/syslink]\n    exec: []\n    deny: []\n",
			err: `p.yaml:8:13: spec.filesystem.write[0]: writable path ROOT/syslink resolves to ROOT/sys through a symlink: name the real path`},
		{name: "readable system path through a symlink resolves", fs: "    read: [ROOT/syslink]\n    write: []\n    exec: []\n    deny: []\n",
			want: []rule{{"ROOT/sys", readAccess}}},
		{name: "deny carves a subtree out", fs: "    read: [ROOT/sys]\n    write: []\n    exec: []\n    deny: [ROOT/sys/secret]\n",
			want: []rule{{"ROOT/sys/a", readAccess}, {"ROOT/sys/b.txt", landlock.ReadFile}}},
		{name: "deny deep down", fs: "    read: [ROOT/sys]\n    write: []\n    exec: []\n    deny: [ROOT/sys/a/x]\n",
			want: []rule{{"ROOT/sys/a/y", readAccess}, {"ROOT/sys/b.txt", landlock.ReadFile}, {"ROOT/sys/secret", readAccess}}},
		{name: "deny of the grant itself", fs: "    read: [ROOT/sys, ROOT/tmp]\n    write: []\n    exec: []\n    deny: [ROOT/sys]\n",
			want: []rule{{"ROOT/tmp", readAccess}}},
		{name: "grant inside a denied tree stays", fs: "    read: [ROOT/sys/a]\n    write: []\n    exec: []\n    deny: [ROOT/sys]\n",
			want: []rule{{"ROOT/sys/a", readAccess}}},
		{name: "missing paths are skipped", fs: "    read: [ROOT/nope]\n    write: []\n    exec: []\n    deny: [ROOT/gone]\n",
			skipped: []string{"spec.filesystem.deny[0]: ROOT/gone does not exist", "spec.filesystem.read[0]: ROOT/nope does not exist"}},
		{name: "missing deny under a writable tree refused", fs: "    read: []\n    write: [\"${WORKSPACE}\"]\n    exec: []\n    deny: [\"${WORKSPACE}/.git/hooks\"]\n",
			err: `p.yaml:10:12: spec.filesystem.deny[0]: ${WORKSPACE}/.git/hooks does not exist inside writable ROOT/ws: Landlock can only deny what exists`},
		{name: "mount inside the workspace refused", fs: "    read: []\n    write: [\"${WORKSPACE}\"]\n    exec: []\n    deny: []\n",
			mounts: "22 1 0:21 / / rw - ext4 /dev/sda rw\n40 22 0:40 / ROOT/ws/sub rw - tmpfs tmpfs rw\n",
			err:    `p.yaml:8:13: spec.filesystem.write[0]: mount point ROOT/ws/sub inside ROOT/ws would lend it this grant`},
		{name: "mount escapes decoded", fs: "    read: []\n    write: [\"${WORKSPACE}\"]\n    exec: []\n    deny: []\n",
			mounts: `40 22 0:40 / ROOT/ws/my\040dir rw - tmpfs tmpfs rw` + "\n",
			err:    `p.yaml:8:13: spec.filesystem.write[0]: mount point ROOT/ws/my dir inside ROOT/ws would lend it this grant`},
		{name: "rules covered by an ancestor are pruned", fs: "    read: [ROOT/sys, ROOT/sys/a]\n    write: []\n    exec: [ROOT/sys/a/x]\n    deny: []\n",
			want: []rule{{"ROOT/sys", readAccess}, {"ROOT/sys/a/x", execAccess}}},
		{name: "abi 1 has no refer or truncate", abi: 1, fs: "    read: []\n    write: [\"${WORKSPACE}\"]\n    exec: []\n    deny: []\n",
			want: []rule{{"ROOT/ws", writeAccess &^ (landlock.Refer | landlock.Truncate)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := fsPolicy(t, root, tc.fs)
			mounts := strings.ReplaceAll(tc.mounts, "ROOT", root)
			if mounts == "" {
				mounts = "22 1 0:21 / / rw - ext4 /dev/sda rw\n"
			}
			c, err := p.Compile(CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", LandlockABI: tc.abi, MountInfo: mounts})
			if tc.err != "" {
				want := strings.ReplaceAll(tc.err, "ROOT", root)
				if err == nil || err.Error() != want {
					t.Fatalf("got error %v\nwant %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []rule
			for _, r := range c.Landlock.Paths {
				got = append(got, rule{strings.ReplaceAll(r.Path, root, "ROOT"), r.Access})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rules\n got %v\nwant %v", got, tc.want)
			}
			var skipped []string
			for _, s := range c.Skipped {
				skipped = append(skipped, strings.ReplaceAll(s, root, "ROOT"))
			}
			if !slices.Equal(skipped, tc.skipped) {
				t.Errorf("skipped %q, want %q", skipped, tc.skipped)
			}
			abi := max(tc.abi, 0)
			if abi == 0 {
				abi = landlock.MaxABI
			}
			if c.Landlock.HandledFS != landlock.FSRights(abi) || c.Landlock.Scoped != landlock.Scopes(abi) || c.LandlockABI != abi {
				t.Errorf("handled %#x scoped %#x abi %d", c.Landlock.HandledFS, c.Landlock.Scoped, c.LandlockABI)
			}
		})
	}
}

func TestCompileEnv(t *testing.T) {
	root := fsTree(t)
	for _, tc := range []struct {
		name string
		env  CompileEnv
		want string
	}{
		{"missing workspace", CompileEnv{Tmp: root + "/tmp"}, `<strict>: ${WORKSPACE}: expected an absolute directory from the launcher, got ""`},
		{"relative", CompileEnv{Workspace: "ws", Tmp: root + "/tmp"}, `<strict>: ${WORKSPACE}: expected an absolute directory from the launcher, got "ws"`},
		{"file", CompileEnv{Workspace: root + "/sys/b.txt", Tmp: root + "/tmp"}, `<strict>: ${WORKSPACE}: ` + root + `/sys/b.txt is not a directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Strict().Compile(tc.env); err == nil || err.Error() != tc.want {
				t.Fatalf("got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestStrictCompiles(t *testing.T) {
	root := fsTree(t)
	c, err := Strict().Compile(CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want uint64 // exact union of granted rights
	}{
		{root + "/ws/sub/f", writeAccess},
		{"/usr/bin/env", execAccess},
		{"/etc/passwd", landlock.ReadFile},
		{"/etc/shadow", 0},
		{"/etc/ssh/ssh_host_rsa_key", 0},
		{"/home/user/.ssh/id_rsa", 0},
		{"/root/.bashrc", 0},
		{"/var/run/docker.sock", 0},
		{"/dev/null", (readAccess | landlock.WriteFile | landlock.Truncate) & landlock.FileRights},
		{"/dev/sda", 0},
		{"/sys/kernel", 0},
	} {
		if got := c.FSAccess(tc.path); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.path, landlock.FSNames(got), landlock.FSNames(tc.want))
		}
	}
	if c.FSAccess("/usr/bin/env")&landlock.WriteFile != 0 || c.FSAccess(root+"/ws/x")&landlock.Execute != 0 {
		t.Error("a writable tree is executable or the other way round")
	}
	if c.Isolation != NetworkNone || len(c.Capabilities) != 0 || c.Limits.MemoryBytes != 512<<20 {
		t.Errorf("isolation %s caps %v limits %+v", c.Isolation, c.Capabilities, c.Limits)
	}
}

func TestCompileSeccomp(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	compile := func(spec string) *Compiled { return compileSpec(t, env, spec) }
	strict := compile("  mode: enforce\n")
	audit := compile("  mode: audit\n")
	allow := compile("  syscalls: {allow: [read, write, unshare, setns, ioctl, socket], defaultAction: kill}\n")
	noNS := compile("  syscalls: {deny: [ptrace], denyNewNamespaces: false}\n")
	for _, tc := range []struct {
		name   string
		c      *Compiled
		sys    string
		arg0   uint64
		action string // "" = no rule: the default applies
		field  string
	}{
		{"denied", strict, "ptrace", 0, "errno EPERM", "spec.syscalls.deny[15]"},
		{"mount", strict, "mount", 0, "errno EPERM", "spec.syscalls.deny[0]"},
		{"unshare new user ns", strict, "unshare", unix.CLONE_NEWUSER, "errno EPERM", "spec.syscalls.denyNewNamespaces"},
		{"clone new net ns", strict, "clone", unix.CLONE_NEWNET | uint64(unix.SIGCHLD), "errno EPERM", "spec.syscalls.denyNewNamespaces"},
		{"plain clone", strict, "clone", unix.CLONE_VM | unix.CLONE_THREAD, "", ""},
		{"unshare files", strict, "unshare", unix.CLONE_FILES, "", ""},
		{"clone3", strict, "clone3", 0, "errno ENOSYS", "spec.syscalls.denyNewNamespaces"},
		{"read", strict, "read", 0, "", ""},
		{"audit logs", audit, "ptrace", 0, "log", "spec.syscalls.deny[15]"},
		{"audit namespaces", audit, "unshare", unix.CLONE_NEWNS, "log", "spec.syscalls.denyNewNamespaces"},
		{"allow list", allow, "write", 0, "allow", "spec.syscalls.allow[1]"},
		{"allow list narrowed", allow, "unshare", unix.CLONE_NEWPID, "errno EPERM", "spec.syscalls.denyNewNamespaces"},
		{"allow list whole", allow, "unshare", unix.CLONE_FS, "allow", "spec.syscalls.allow[2]"},
		{"namespace rule beats allow", allow, "setns", 0, "errno EPERM", "spec.syscalls.denyNewNamespaces"},
		{"allow list default", allow, "ptrace", 0, "", ""},
		{"namespaces allowed", noNS, "unshare", unix.CLONE_NEWUSER, "", ""},
		{"allow list keeps the family allowlist", allow, "socket", unix.AF_PACKET, "errno EAFNOSUPPORT", "spec.network.allowNetlink"},
		{"allow list socket", allow, "socket", unix.AF_INET6, "allow", "spec.syscalls.allow[5]"},
		{"audit families", audit, "socket", unix.AF_VSOCK, "log", "spec.network.allowNetlink"},
		{"inotify", strict, "inotify_init", 0, "errno EPERM", "spec.syscalls.denyFileWatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := sysnr(t, tc.sys)
			r, ok := tc.c.SyscallRuleFor(nr, [6]uint64{tc.arg0})
			if !ok {
				if tc.action != "" {
					t.Fatalf("no rule, want %s", tc.action)
				}
				return
			}
			rule, _ := tc.c.RuleByID(r.RuleID)
			if r.Action != tc.action || rule.Field != tc.field || rule.Layer != "seccomp" {
				t.Fatalf("got %s from %s, want %s from %s", r.Action, rule.Field, tc.action, tc.field)
			}
		})
	}
	// ioctl is narrowed on its second argument: an allow list keeps TIOCSTI refused
	if r, ok := allow.SyscallRuleFor(unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}); !ok || r.Action != "errno EPERM" {
		t.Errorf("allow-list TIOCSTI: %+v", r)
	}
	if r, ok := allow.SyscallRuleFor(unix.SYS_IOCTL, [6]uint64{0, unix.TCGETS}); !ok || r.Action != "allow" {
		t.Errorf("allow-list TCGETS: %+v", r)
	}
	// the program's tail is the default action
	for _, tc := range []struct {
		c    *Compiled
		want uint32
	}{{strict, unix.SECCOMP_RET_ALLOW}, {allow, unix.SECCOMP_RET_KILL_PROCESS}} {
		if last := tc.c.Seccomp[len(tc.c.Seccomp)-1]; last.K != tc.want {
			t.Errorf("default %#x, want %#x", last.K, tc.want)
		}
	}
	// audit mode refuses nothing: no kill and no errno anywhere in the program
	for _, in := range audit.Seccomp {
		if in.Code == unix.BPF_RET|unix.BPF_K && in.K != unix.SECCOMP_RET_ALLOW && in.K != unix.SECCOMP_RET_LOG {
			t.Errorf("audit program returns %#x", in.K)
		}
	}
}

func sysnr(t *testing.T, name string) uint32 {
	t.Helper()
	for nr, n := range map[string]uint32{"socket": unix.SYS_SOCKET, "inotify_init": unix.SYS_INOTIFY_INIT, "ptrace": unix.SYS_PTRACE, "mount": unix.SYS_MOUNT, "unshare": unix.SYS_UNSHARE,
		"clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3, "read": unix.SYS_READ, "write": unix.SYS_WRITE, "setns": unix.SYS_SETNS} {
		if nr == name {
			return n
		}
	}
	t.Fatalf("no number for %s", name)
	return 0
}

func TestCompileNetwork(t *testing.T) {
	root := fsTree(t)
	env := CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	compile := func(egress string) *Compiled {
		t.Helper()
		p, err := Parse("p.yaml", []byte(header+"spec:\n  isolation: {network: host-filtered}\n  network:\n    egress:\n"+egress))
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Compile(env)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	web := compile(`      - {cidr: 0.0.0.0/0, ports: [443]}
      - {cidr: "::/0", ports: [443]}
      - {cidr: 10.0.0.0/8, ports: [22]}
      - {cidr: 10.1.0.0/16, ports: ["8000-8100"]}
      - {cidr: 10.1.0.53, ports: [53], protocol: udp}
`)
	meta := compile(`      - {cidr: 169.254.169.254, ports: [80]}
      - {cidr: "fe80::/10", ports: [1-65535]}
`)
	none := compile("      []\n")
	tcp, udp := uint8(ProtoTCP), uint8(ProtoUDP)
	for _, tc := range []struct {
		name  string
		c     *Compiled
		addr  string
		port  uint16
		proto uint8
		allow bool
		field string // of the rule that decided; "" = default deny
	}{
		{"https anywhere", web, "93.184.216.34", 443, tcp, true, "spec.network.egress[0]"},
		{"https v6", web, "2606:2800::1", 443, tcp, true, "spec.network.egress[1]"},
		{"v4-mapped is v4", web, "::ffff:93.184.216.34", 443, tcp, true, "spec.network.egress[0]"},
		{"other port", web, "93.184.216.34", 80, tcp, false, ""},
		{"udp is not tcp", web, "93.184.216.34", 443, udp, false, ""},
		{"ssh inside 10/8", web, "10.9.9.9", 22, tcp, true, "spec.network.egress[2]"},
		{"narrower prefix keeps wider rules", web, "10.1.2.3", 22, tcp, true, "spec.network.egress[2]"},
		{"narrower prefix own range", web, "10.1.2.3", 8050, tcp, true, "spec.network.egress[3]"},
		{"range end", web, "10.1.2.3", 8101, tcp, false, ""},
		{"host rule", web, "10.1.0.53", 53, udp, true, "spec.network.egress[4]"},
		{"https inherited down to a host", web, "10.1.0.53", 443, tcp, true, "spec.network.egress[0]"},
		{"metadata despite 0/0", web, "169.254.169.254", 443, tcp, false, "builtin"},
		{"link-local despite 0/0", web, "169.254.1.1", 443, tcp, false, "builtin"},
		{"v6 link-local despite ::/0", web, "fe80::1", 443, tcp, false, "builtin"},
		{"v6 metadata", web, "fd00:ec2::254", 443, tcp, false, "builtin"},
		{"metadata through nat64", web, "64:ff9b::169.254.169.254", 443, tcp, false, "builtin"},
		{"named metadata", meta, "169.254.169.254", 80, tcp, true, "spec.network.egress[0]"},
		{"named metadata other port", meta, "169.254.169.254", 443, tcp, false, "builtin"},
		{"named v6 link-local", meta, "fe80::1", 80, tcp, true, "spec.network.egress[1]"},
		{"no rules", none, "1.1.1.1", 443, tcp, false, ""},
		{"no rules metadata", none, "169.254.169.254", 80, tcp, false, "builtin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow, id := tc.c.Network.Decide(netip.MustParseAddr(tc.addr), tc.port, tc.proto)
			rule, ok := tc.c.RuleByID(id)
			if allow != tc.allow || ok != (tc.field != "") || rule.Field != tc.field {
				t.Fatalf("allow %v by %d %q, want allow %v by %q", allow, id, rule.Field, tc.allow, tc.field)
			}
		})
	}
	t.Run("metadata named: link-local deny dropped only where named", func(t *testing.T) {
		var builtins []string
		for _, r := range meta.Rules {
			if r.Field == "builtin" {
				builtins = append(builtins, strings.Fields(r.Text)[1])
			}
		}
		want := []string{"169.254.0.0/16:", "fd00:ec2::254/128:", "64:ff9b::a9fe:0/112:"}
		if !slices.Equal(builtins, want) {
			t.Fatalf("builtin denies %v, want %v", builtins, want)
		}
	})
	t.Run("lpm keys are v6", func(t *testing.T) {
		for _, p := range web.Network.Prefixes {
			bits, addr := p.Key()
			if !netip.AddrFrom16(addr).Is6() || bits > 128 || len(p.Entries) == 0 || len(p.Entries) > MaxNetEntries {
				t.Errorf("prefix %s: key %d %x, %d entries", p.Prefix, bits, addr, len(p.Entries))
			}
		}
		if !slices.IsSortedFunc(web.Network.Entries, compareEntries) {
			t.Error("entries not sorted")
		}
	})
	t.Run("sockets", func(t *testing.T) {
		for _, s := range []struct {
			fam   uint16
			typ   int
			allow bool
		}{
			{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, true},
			{unix.AF_INET6, unix.SOCK_DGRAM, true},
			{unix.AF_UNIX, unix.SOCK_SEQPACKET, true},
			{unix.AF_INET, unix.SOCK_RAW, false},
			{unix.AF_PACKET, unix.SOCK_RAW, false},
			{unix.AF_NETLINK, unix.SOCK_RAW, false},
			{unix.AF_VSOCK, unix.SOCK_STREAM, false},
		} {
			if got := web.Network.SocketAllowed(s.fam, s.typ); got != s.allow {
				t.Errorf("socket(%d, %d): %v", s.fam, s.typ, got)
			}
		}
	})
}

func TestCompileNetworkTooManyEntries(t *testing.T) {
	var b strings.Builder
	b.WriteString(header + "spec:\n  isolation: {network: host-filtered}\n  network:\n    egress:\n")
	b.WriteString("      - {cidr: 0.0.0.0/0, ports: [")
	for i := range MaxNetEntries + 1 {
		fmt.Fprintf(&b, "%d,", 1000+2*i)
	}
	b.WriteString("]}\n")
	if errs := Check(writeFile(t, b.String())); len(errs) != 1 || !strings.Contains(errs[0].Error(), "more than 64") {
		t.Fatalf("got %v", errs)
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestHash(t *testing.T) {
	a, b := fsTree(t), fsTree(t)
	compile := func(root, spec string, abi int) string {
		t.Helper()
		p, err := Parse("p.yaml", []byte(header+"spec:\n"+spec))
		if err != nil {
			t.Fatal(err)
		}
		c, err := p.Compile(CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", LandlockABI: abi, MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"})
		if err != nil {
			t.Fatal(err)
		}
		h := c.Hash()
		if !strings.HasPrefix(h, "sha256:") || len(h) != 7+64 {
			t.Fatalf("hash %q", h)
		}
		return h
	}
	base := compile(a, "  mode: enforce\n", 0)
	for _, tc := range []struct {
		name string
		h    string
		same bool
	}{
		{"again", compile(a, "  mode: enforce\n", 0), true},
		{"another call's workspace", compile(b, "  mode: enforce\n", 0), true},
		{"field order and comments do not matter", compile(a, "  # x\n  mode: enforce\n  resources: {memory: 512Mi}\n", 0), true},
		{"mode", compile(a, "  mode: audit\n", 0), false},
		{"limits", compile(a, "  resources: {pids: 10}\n", 0), false},
		{"abi", compile(a, "  mode: enforce\n", 3), false},
		{"syscalls", compile(a, "  syscalls: {deny: [ptrace]}\n", 0), false},
		{"extra read path", compile(a, "  filesystem: {read: [/usr, /bin, /sbin, /lib, /lib64, /etc, /proc, /dev/zero, /dev/random, /dev/urandom, /opt]}\n", 0), !exists("/opt")},
	} {
		if (tc.h == base) != tc.same {
			t.Errorf("%s: same hash %v, want %v", tc.name, tc.h == base, tc.same)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestCompileEntryRemovedWhileListed: a carve lists whole directories (the strict policy's
// deny under /etc lists /etc), and the host may remove an entry between the listing and the
// look at it. The entry gets no rule and is named in Skipped; the compile does not fail.
func TestCompileEntryRemovedWhileListed(t *testing.T) {
	root := fsTree(t)
	p := fsPolicy(t, root, "    read: [ROOT/sys]\n    write: []\n    exec: []\n    deny: [ROOT/sys/secret]\n")
	// the listing (os.ReadDir) still shows b.txt; the look at it finds it gone
	reads := &FSReads{paths: map[string]pathFact{root + "/sys/b.txt": {errno: unix.ENOENT}}}
	c, err := p.Compile(CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", MountInfo: "22 1 0:21 / / rw - ext4 /dev/sda rw\n", Reads: reads})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.Landlock.Paths {
		got = append(got, strings.ReplaceAll(r.Path, root, "ROOT"))
	}
	if want := []string{"ROOT/sys/a"}; !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
	want := "spec.filesystem: " + root + "/sys/b.txt was removed while the policy compiled"
	if !slices.Contains(c.Skipped, want) {
		t.Errorf("skipped %q, want it to name %q", c.Skipped, want)
	}
}
