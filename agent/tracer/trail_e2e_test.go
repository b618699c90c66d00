package tracer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/bermbin"
)

// These are real calls through `berm run`, by a tool that tries to make the trail lie: the
// events are read back from the call's timeline.

// runTool runs a Python script as the call's tool in a fresh workspace and returns its
// stdout and the call's events.
func runTool(t *testing.T, callID, script string, args ...string) (string, []event.Event) {
	t.Helper()
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "tool.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(append([]string{"run", "--state-dir", state, "--no-rules", "--call-id", callID, "--workspace", ws}, args...),
		"--", "python3", "tool.py")
	r := bermbin.Berm(t, nil, args...)
	if r.Exit != 0 {
		t.Fatalf("tool exit %d\nstdout: %s\nstderr: %s", r.Exit, r.Stdout, r.Stderr)
	}
	return r.Stdout, bermbin.Timeline(t, state, callID).Events
}

// waitBlocked is Python: wait until the thread tid is inside syscall nr (it is blocked there).
const waitBlocked = `
import os, time
def wait_blocked(tid, nr):
    while True:
        try:
            with open(f"/proc/self/task/{tid}/syscall") as f:
                if f.read().split()[0] == str(nr):
                    return
        except (OSError, IndexError):
            pass
        time.sleep(0.001)
`

// An open that blocks on a FIFO while another thread rewrites its path buffer is recorded
// with the file the kernel opened, not with what the buffer says afterwards.
func TestFIFOBlockedOpenWithRewrittenPath(t *testing.T) {
	out, events := runTool(t, "fifo-rewrite", waitBlocked+`
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
os.mkfifo("fifo")
buf = ctypes.create_string_buffer(os.path.abspath("fifo").encode(), 4096)
main = threading.get_native_id()
def rewrite():
    wait_blocked(main, 257)  # openat
    ctypes.memmove(buf, b"zzz\0", 4)
    os.close(os.open("fifo", os.O_WRONLY))  # let the reader through
t = threading.Thread(target=rewrite)
t.start()
fd = libc.open(buf, os.O_RDONLY)
t.join()
print(fd, buf.value.decode())
`, "--policy", specialFilesPolicy(t))
	if !strings.HasSuffix(strings.TrimSpace(out), " zzz") || strings.HasPrefix(out, "-1") {
		t.Fatalf("the tool did not open the FIFO with a rewritten buffer: %q", out)
	}
	var real int
	for _, e := range events {
		if e.Open == nil {
			continue
		}
		if strings.Contains(e.Open.Path, "zzz") {
			t.Errorf("open recorded with the rewritten path: %+v", *e.Open)
		}
		if e.Open.Flags == uint32(os.O_RDONLY) && strings.HasSuffix(e.Open.Path, "/ws/fifo") && e.Open.Result >= 0 {
			real++
			if e.Open.PathSource != "kernel" {
				t.Errorf("FIFO open path source %q, want kernel", e.Open.PathSource)
			}
		}
	}
	if real != 1 {
		t.Errorf("%d read opens of the FIFO recorded with its real path, want 1", real)
	}
}

// A connect that blocks (a full unix listen queue) while another thread rewrites its
// sockaddr is recorded with the address the kernel connected to. No cgroup connect hook runs
// for unix sockets: the address is the one read at syscall entry, before the call blocked,
// and marked "user".
func TestBlockedConnectWithRewrittenSockaddr(t *testing.T) {
	out, events := runTool(t, "connect-rewrite", waitBlocked+`
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("real.sock")
srv.listen(0)
first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
first.connect("real.sock")  # the queue is full now
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sa = ctypes.create_string_buffer(struct.pack("H", socket.AF_UNIX) + b"real.sock", 110)
main = threading.get_native_id()
def rewrite():
    wait_blocked(main, 42)  # connect
    ctypes.memmove(ctypes.addressof(sa) + 2, b"fake.sock", 9)
    srv.accept()  # room in the queue: the blocked connect goes on
t = threading.Thread(target=rewrite)
t.start()
r = libc.connect(c.fileno(), sa, 2 + 9 + 1)
t.join()
print(r, sa.raw[2:11].decode())
`, "--policy", specialFilesPolicy(t))
	if strings.TrimSpace(out) != "0 fake.sock" {
		t.Fatalf("the tool did not connect with a rewritten sockaddr: %q", out)
	}
	var real int
	for _, e := range events {
		if e.Connect == nil || e.Connect.Family != "unix" {
			continue
		}
		switch e.Connect.Addr {
		case "fake.sock":
			t.Errorf("connect recorded with the rewritten address: %+v", *e.Connect)
		case "real.sock":
			real++
			if e.Connect.AddrSource != "user" {
				t.Errorf("connect address source %q, want user (read at entry)", e.Connect.AddrSource)
			}
		}
	}
	if real != 2 {
		t.Errorf("%d connects recorded to real.sock, want 2", real)
	}
}

// A TCP connect that blocks (the listener's accept queue is full: its SYN is dropped until the
// server accepts) while another thread rewrites its sockaddr is recorded with the address the
// kernel connected to, taken from the kernel's own copy of the sockaddr by the cgroup connect
// hook (source "kernel"), not from the caller's memory.
func TestBlockedTCPConnectWithRewrittenSockaddr(t *testing.T) {
	pol := loopbackPolicy(t)
	out, events := runTool(t, "tcp-connect-rewrite", waitBlocked+`
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(0)
port = srv.getsockname()[1]
first = socket.create_connection(("127.0.0.1", port))  # the accept queue is full now
c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
# sockaddr_in: the family in host order, port and address in network order
sa = ctypes.create_string_buffer(struct.pack("H", socket.AF_INET) + struct.pack("!H4s8x", port, socket.inet_aton("127.0.0.1")), 16)
main = threading.get_native_id()
def rewrite():
    wait_blocked(main, 42)  # connect
    ctypes.memmove(ctypes.addressof(sa) + 2, struct.pack("!H4s", 9, socket.inet_aton("10.9.9.9")), 6)
    srv.accept()  # room in the queue: the SYN's retransmission gets through
t = threading.Thread(target=rewrite)
t.start()
r = libc.connect(c.fileno(), sa, 16)
t.join()
port2, addr2 = struct.unpack("!H4s", sa.raw[2:8])
print(r, port, socket.inet_ntoa(addr2), port2)
`, "--policy", pol)
	f := strings.Fields(out)
	if len(f) != 4 || f[0] != "0" || f[2] != "10.9.9.9" || f[3] != "9" {
		t.Fatalf("the tool did not connect with a rewritten sockaddr: %q", out)
	}
	port := f[1]
	var real int
	for _, e := range events {
		if e.Connect == nil || e.Connect.Family != "inet" {
			continue
		}
		switch {
		case e.Connect.Addr == "10.9.9.9" || e.Connect.Port == 9:
			t.Errorf("connect recorded with the rewritten address: %+v", *e.Connect)
		case e.Connect.Addr == "127.0.0.1" && fmt.Sprint(e.Connect.Port) == port:
			real++
			if e.Connect.AddrSource != "kernel" {
				t.Errorf("connect address source %q, want kernel (the cgroup connect hook's copy): %+v", e.Connect.AddrSource, *e.Connect)
			}
		}
	}
	if real != 2 {
		t.Errorf("%d connects recorded to 127.0.0.1:%s, want 2 (the first and the blocked one)", real, port)
	}
}

// specialFilesPolicy lets the tool make FIFOs and unix sockets in its workspace (refused by
// the strict policy when made).
func specialFilesPolicy(t *testing.T) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "special.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: special-files}
spec:
  filesystem: {allowSpecialFiles: true}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// loopbackPolicy lets the tool reach 127.0.0.1 on the host's network.
func loopbackPolicy(t *testing.T) string {
	t.Helper()
	pol := filepath.Join(t.TempDir(), "loopback.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: loopback}
spec:
  isolation: {network: host-filtered}
  filesystem: {allowSpecialFiles: true} # the tools bind unix sockets in the workspace
  network:
    egress:
      - {cidr: 127.0.0.1/32, ports: [1-65535]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// The connect hook also runs for a TCP Fast Open sendto, which is no connect: the destination
// it saw there must not become the next connect's. A unix connect right after one (no hook runs
// for it) is recorded with its own address, read from user memory, and no connect to the
// sendto's destination appears.
func TestFastOpenDestinationIsNotANextConnects(t *testing.T) {
	out, events := runTool(t, "tfo-then-unix", `
import socket
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(8)
port = srv.getsockname()[1]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", port))
except OSError as e:
    print("sendto", e.errno)
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
usrv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
usrv.bind("real.sock")
usrv.listen(1)
u.connect("real.sock")
print("ok", port)
`, "--policy", loopbackPolicy(t))
	f := strings.Fields(out)
	if len(f) < 2 || f[len(f)-2] != "ok" {
		t.Fatalf("the tool did not run through: %q", out)
	}
	port := f[len(f)-1]
	var unixReal int
	for _, e := range events {
		if e.Connect == nil {
			continue
		}
		if e.Connect.Family == "inet" && fmt.Sprint(e.Connect.Port) == port {
			t.Errorf("a connect recorded to the Fast Open sendto's destination: %+v", *e.Connect)
		}
		if e.Connect.Family == "unix" && e.Connect.Addr == "real.sock" {
			unixReal++
			if e.Connect.AddrSource != "user" {
				t.Errorf("unix connect address source %q, want user", e.Connect.AddrSource)
			}
		}
	}
	if unixReal != 1 {
		t.Errorf("%d unix connects to real.sock recorded, want 1", unixReal)
	}
}

// Paths past 256 and past 4096 bytes, and argv past 512 bytes, are recorded whole or marked
// cut with their whole length.
func TestLongPathsAndArgvAreWholeOrMarked(t *testing.T) {
	dotted := "/" + strings.Repeat("./", 200) + "etc/hostname" // 413 bytes, opens /etc/hostname
	missing := strings.Repeat("d/", 150) + "nofile"            // 306 bytes, relative, fails
	tooLong := "/" + strings.Repeat("a", 5000)                 // refused by the kernel: ENAMETOOLONG
	argv6k := strings.Repeat("y", 6000)
	argv20k := strings.Repeat("z", 20000)
	_, events := runTool(t, "long-paths", fmt.Sprintf(`
import os, subprocess
open(%q).close()
for p in (%q, %q):
    try:
        open(p)
    except OSError:
        pass
subprocess.run(["/bin/true", %q])
subprocess.run(["/bin/true", %q])
`, dotted, missing, tooLong, argv6k, argv20k))

	var sawDotted, sawMissing, sawTooLong, saw6k, saw20k bool
	for _, e := range events {
		switch {
		case e.Open != nil && e.Open.Path == "/etc/hostname" && e.Open.Result >= 0 && e.Comm == "python3":
			sawDotted = e.Open.PathSource == "kernel" && !e.Open.PathTruncated
		case e.Open != nil && e.Open.Path == missing:
			sawMissing = !e.Open.PathTruncated && e.Open.PathSource == "user" &&
				strings.HasSuffix(e.Open.ResolvedPath, "/ws/"+missing)
		case e.Open != nil && strings.HasPrefix(e.Open.Path, "/aaaa"):
			sawTooLong = e.Open.PathTruncated && e.Open.PathLen == uint32(len(tooLong)) && len(e.Open.Path) == 4095 &&
				e.Open.Errno == "ENAMETOOLONG"
			if !sawTooLong {
				t.Errorf("over-long path: truncated %v, len %d of %d recorded, errno %s",
					e.Open.PathTruncated, e.Open.PathLen, len(e.Open.Path), e.Open.Errno)
			}
		case e.Exec != nil && len(e.Exec.Argv) == 2 && strings.HasPrefix(e.Exec.Argv[1], "yyy"):
			saw6k = e.Exec.Argv[1] == argv6k && !e.Exec.Truncated && e.Exec.ArgsLen == uint32(len("/bin/true")+1+len(argv6k)+1)
		case e.Exec != nil && len(e.Exec.Argv) == 2 && strings.HasPrefix(e.Exec.Argv[1], "zzz"):
			saw20k = e.Exec.Truncated && e.Exec.ArgsLen == uint32(len("/bin/true")+1+len(argv20k)+1)
		}
	}
	if !sawDotted || !sawMissing || !sawTooLong || !saw6k || !saw20k {
		t.Errorf("recorded whole or marked: %d-byte path to /etc/hostname %v, %d-byte missing path %v, "+
			"%d-byte path %v, 6k argv %v, 20k argv %v", len(dotted), sawDotted, len(missing), sawMissing,
			len(tooLong), sawTooLong, saw6k, saw20k)
	}
}

// A wipe that leaves only an innocent-looking open behind (punch a hole, truncate, restore
// the mtime), and the other destructive metadata changes, are each recorded with the file.
func TestDestructiveSequenceIsRecordedWithPaths(t *testing.T) {
	_, events := runTool(t, "destructive", `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
with open("report.csv", "w") as f:
    f.write("x" * 65536)
st = os.stat("report.csv")
fd = os.open("report.csv", os.O_RDWR)
assert libc.fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(4096)) == 0  # PUNCH_HOLE|KEEP_SIZE
os.ftruncate(fd, 100)
os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))           # futimens: utimensat(fd, NULL)
os.close(fd)
os.utime("report.csv", ns=(st.st_atime_ns, st.st_mtime_ns))  # utimensat(AT_FDCWD, path)
os.truncate("report.csv", 10)
os.chmod("report.csv", 0o600)
os.chown("report.csv", os.getuid(), os.getgid())
open("other", "w").close()
assert libc.renameat2(-100, b"report.csv", -100, b"other", 2) == 0  # RENAME_EXCHANGE
os.link("other", "hard")
os.symlink("other", "soft")
os.mkfifo("pipe")
`, "--policy", specialFilesPolicy(t))
	type want struct {
		name, path, path2 string
		source            string
		check             func(*event.Syscall) bool
	}
	wants := []want{
		{"fallocate", "/ws/report.csv", "", "kernel", func(s *event.Syscall) bool { return s.Args[1] == 3 }},
		{"ftruncate", "/ws/report.csv", "", "kernel", nil},
		{"utimensat", "/ws/report.csv", "", "kernel", nil},
		{"utimensat", "report.csv", "", "user", nil},
		{"truncate", "report.csv", "", "user", nil},
		{"chmod", "report.csv", "", "user", nil},
		{"chown", "report.csv", "", "user", nil},
		{"renameat2", "report.csv", "other", "user", func(s *event.Syscall) bool { return s.Args[4] == 2 }},
		{"link", "other", "hard", "user", nil},
		{"symlink", "soft", "other", "user", nil},
		{"mknodat", "pipe", "", "user", nil},
	}
	for _, w := range wants {
		found := false
		for _, e := range events {
			s := e.Syscall
			if s == nil || s.Name != w.name || s.Result != 0 || s.PathSource != w.source {
				continue
			}
			if w.source == "kernel" && !strings.HasSuffix(s.Path, w.path) || w.source == "user" && s.Path != w.path {
				continue
			}
			if s.Path2 == w.path2 && (w.check == nil || w.check(s)) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no %s of %s %s (%s) in the trail", w.name, w.path, w.path2, w.source)
		}
	}
	if t.Failed() {
		for _, e := range events {
			if e.Syscall != nil {
				t.Logf("syscall %s path %q path2 %q source %q -> %d", e.Syscall.Name, e.Syscall.Path, e.Syscall.Path2, e.Syscall.PathSource, e.Syscall.Result)
			}
		}
	}
}

// A relative path is recorded as the file the kernel found, or, when the open failed, joined
// to the directory the kernel resolved it against (the cwd, or dirfd's), never the workspace.
// (The dirfd is /usr/lib's: /usr itself is not listable under strict, which carves npm's global
// config, /usr/etc/npmrc, out of it.)
func TestRelativePathsResolveAgainstTheirDirectory(t *testing.T) {
	_, events := runTool(t, "relative", `
import os
os.chdir("/etc")
open("passwd").close()
for p in ("nope-cwd",):
    try:
        open(p)
    except OSError:
        pass
d = os.open("/usr/lib", os.O_RDONLY | os.O_DIRECTORY)
try:
    os.open("nope-dirfd", os.O_RDONLY, dir_fd=d)
except OSError:
    pass
`)
	cases := []struct {
		path, source, resolved string
		ok                     bool
	}{
		{"/etc/passwd", "kernel", "", true},
		{"nope-cwd", "user", "/etc/nope-cwd", false},
		{"nope-dirfd", "user", "/usr/lib/nope-dirfd", false},
	}
	for _, c := range cases {
		found := false
		for _, e := range events {
			o := e.Open
			if o != nil && o.Path == c.path && o.PathSource == c.source && o.ResolvedPath == c.resolved && (o.Result >= 0) == c.ok {
				found = true
			}
		}
		if !found {
			t.Errorf("no open of %s (source %s, resolved %q) in the trail", c.path, c.source, c.resolved)
		}
	}
}
