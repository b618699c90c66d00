// Package hostile holds tools that attack the sandbox from inside, shared by the embedded
// (sandboxer) and bermd end-to-end tests.
package hostile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// SpecialFiles is a python3 tool that tries to leave in its workspace (and /tmp) what a host
// user could trip on: FIFOs, unix sockets, device nodes, and setuid or setgid files by every
// path we know. Each attempt prints one JSON line: its name and the errno it got (0: it
// worked). It runs in the workspace.
const SpecialFiles = `
import ctypes, json, os, socket, stat, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def out(name, err):
    print(json.dumps({"case": name, "errno": err}), flush=True)
def attempt(name, f):
    try:
        f()
        out(name, 0)
    except OSError as e:
        out(name, e.errno or -1)
def sys(name, nr, *args):
    r = libc.syscall(nr, *args)
    out(name, ctypes.get_errno() if r < 0 else 0)
def sh(name, *argv):
    p = subprocess.run(argv, stderr=subprocess.DEVNULL)
    out(name, 0 if p.returncode == 0 else 1)
def bind(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
attempt("mkfifo", lambda: os.mkfifo("fifo-mkfifo"))
attempt("mknod-fifo", lambda: os.mknod("fifo-mknod", 0o644 | stat.S_IFIFO))
sh("mkfifo-tool", "mkfifo", "fifo-tool")
attempt("bind-workspace", lambda: bind("sock-ws"))
attempt("bind-tmp", lambda: bind("/tmp/sock-tmp"))
attempt("mknod-char", lambda: os.mknod("dev-char", 0o644 | stat.S_IFCHR, os.makedev(1, 3)))
attempt("mknod-block", lambda: os.mknod("dev-block", 0o644 | stat.S_IFBLK, os.makedev(7, 0)))
for name in ["suid-chmod", "sgid-chmod", "suid-fchmod", "suid-fchmodat", "suid-fchmodat2", "suid-procfd", "suid-tmpfile"]:
    open(name, "w").close()
    os.chmod(name, 0o755)
sh("chmod-u+s", "chmod", "u+s", "suid-chmod")
sh("chmod-g+s", "chmod", "g+s", "sgid-chmod")
def fchmod():
    fd = os.open("suid-fchmod", os.O_RDONLY)
    try:
        os.fchmod(fd, 0o4755)
    finally:
        os.close(fd)
attempt("fchmod", fchmod)
def fchmodat():
    d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.chmod("suid-fchmodat", 0o4755, dir_fd=d)
    finally:
        os.close(d)
attempt("fchmodat", fchmodat)
sys("fchmodat2", 452, -100, b"suid-fchmodat2", 0o4755, 0)
def procfd():
    fd = os.open("suid-procfd", os.O_RDONLY)
    try:
        os.chmod("/proc/self/fd/%d" % fd, 0o4755)
    finally:
        os.close(fd)
attempt("chmod-procfd", procfd)
attempt("open-creat", lambda: os.close(os.open("suid-open", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-creat-sgid", lambda: os.close(os.open("sgid-open", os.O_CREAT | os.O_WRONLY, 0o2755)))
def creat():
    fd = libc.creat(b"suid-creat", 0o4755)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "creat")
    os.close(fd)
attempt("creat", creat)
attempt("mknod-suid", lambda: os.mknod("suid-mknod", 0o4755 | stat.S_IFREG))
sh("install-4755", "install", "-m", "4755", "/dev/null", "suid-install")
attempt("tmpfile-4755", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755)))
def tmpfile_fchmod_link():
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        try:
            os.fchmod(fd, 0o4755)
        finally:
            os.link("/proc/self/fd/%d" % fd, "suid-tmpfile-linked", follow_symlinks=True)
    finally:
        os.close(fd)
attempt("tmpfile-fchmod-linkat", tmpfile_fchmod_link)
class OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
how = OpenHow(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
sys("openat2", 437, -100, b"suid-openat2", ctypes.byref(how), ctypes.c_size_t(24))
attempt("mkdir-sgid", lambda: os.mkdir("sgid-dir", 0o2755))
`

// Case is one attempt of SpecialFiles and the denial that must name its refusal.
type Case struct {
	Name   string
	Layer  string
	Rule   string // a part of the denial's rule
	Object string // a part of the denial's object
}

const setid = "no setuid or setgid bits"

// SpecialFilesCases are SpecialFiles's attempts.
var SpecialFilesCases = []Case{
	{"mkfifo", event.LayerLandlock, "make_fifo", "fifo-mkfifo"},
	{"mknod-fifo", event.LayerLandlock, "make_fifo", "fifo-mknod"},
	{"mkfifo-tool", event.LayerLandlock, "make_fifo", "fifo-tool"},
	{"bind-workspace", event.LayerLandlock, "make_sock", "bind("},
	{"bind-tmp", event.LayerLandlock, "make_sock", "bind("},
	{"mknod-char", event.LayerLandlock, "make_char", "dev-char"},
	{"mknod-block", event.LayerLandlock, "make_block", "dev-block"},
	{"chmod-u+s", event.LayerSeccomp, setid, "suid-chmod"},
	{"chmod-g+s", event.LayerSeccomp, setid, "sgid-chmod"},
	{"fchmod", event.LayerSeccomp, setid, "suid-fchmod"},
	{"fchmodat", event.LayerSeccomp, setid, "suid-fchmodat "},
	{"fchmodat2", event.LayerSeccomp, setid, "suid-fchmodat2"},
	{"chmod-procfd", event.LayerSeccomp, setid, "/proc/self/fd/"},
	{"open-creat", event.LayerSeccomp, setid, "suid-open"},
	{"open-creat-sgid", event.LayerSeccomp, setid, "sgid-open"},
	{"creat", event.LayerSeccomp, setid, "suid-creat"},
	{"mknod-suid", event.LayerSeccomp, setid, "suid-mknod"},
	{"install-4755", event.LayerSeccomp, setid, "suid-install"},
	{"tmpfile-4755", event.LayerSeccomp, setid, "/ws 04755"},
	{"tmpfile-fchmod-linkat", event.LayerSeccomp, setid, "fchmod "},
	{"openat2", event.LayerSeccomp, "openat2", "openat2"},
	{"mkdir-sgid", event.LayerSeccomp, setid, "sgid-dir"},
}

// CheckSpecialFiles checks the tool's output (its JSON lines), the call's denials and the
// workspace after the call: every attempt refused when made, each refusal a denial with its
// layer and rule, nothing special left behind.
func CheckSpecialFiles(t *testing.T, stdout string, events []event.Event, ws string) {
	t.Helper()
	var denials []event.Denial
	for _, e := range events {
		if e.Denial != nil {
			denials = append(denials, *e.Denial)
		}
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r struct {
			Case  string
			Errno int
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("tool output %q: %v\n%s", line, err, stdout)
		}
		got[r.Case] = r.Errno
	}
	used := make([]bool, len(denials))
	for _, c := range SpecialFilesCases {
		errno, ok := got[c.Name]
		switch {
		case !ok:
			t.Errorf("%s: not attempted (tool output:\n%s)", c.Name, stdout)
		case errno == 0:
			t.Errorf("%s: worked, want it refused when made", c.Name)
		}
		found := false
		for i, d := range denials {
			if !used[i] && d.Layer == c.Layer && strings.Contains(d.Rule, c.Rule) && strings.Contains(d.Object, c.Object) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("%s: no %s denial with rule ~%q and object ~%q", c.Name, c.Layer, c.Rule, c.Object)
		}
	}
	if t.Failed() {
		for _, d := range denials {
			t.Logf("denial: %s | %s | %s", d.Layer, d.Rule, d.Object)
		}
	}
	filepath.WalkDir(ws, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		m := info.Mode()
		if m&(os.ModeNamedPipe|os.ModeSocket|os.ModeDevice|os.ModeCharDevice) != 0 || (!m.IsDir() && m&(os.ModeSetuid|os.ModeSetgid) != 0) {
			t.Errorf("left in the workspace: %s (%v)", p, m)
		}
		return nil
	})
}
