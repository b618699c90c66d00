package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/bermbin"
)

// testUser is a real user made for a test (useradd), removed at its end.
type testUser struct {
	name     string
	uid, gid uint32
	groups   []uint32
}

// mkGroup and mkUser make real groups and users, removed when the test ends.
func mkGroup(t *testing.T, name string) {
	t.Helper()
	exec.Command("groupdel", name).Run() // left by a killed run
	if out, err := exec.Command("groupadd", name).CombinedOutput(); err != nil {
		t.Fatalf("groupadd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("groupdel", name).Run() })
}

func mkUser(t *testing.T, name string, groups ...string) testUser {
	t.Helper()
	exec.Command("userdel", name).Run()
	args := []string{"-M", "-N", "-g", "nogroup", "-s", "/usr/sbin/nologin"}
	if _, err := user.LookupGroup("nogroup"); err != nil {
		args = []string{"-M", "-U", "-s", "/usr/sbin/nologin"}
	}
	if len(groups) > 0 {
		args = append(args, "-G", strings.Join(groups, ","))
	}
	if out, err := exec.Command("useradd", append(args, name)...).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	tu := testUser{name: name}
	id, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	tu.uid, tu.gid = uint32(id), uint32(gid)
	gids, _ := u.GroupIds()
	for _, g := range gids {
		n, _ := strconv.Atoi(g)
		tu.groups = append(tu.groups, uint32(n))
	}
	return tu
}

// as runs a command as the user (its uid, primary group and groups), in dir.
func (u testUser) as(t *testing.T, dir string, env []string, name string, args ...string) bermbin.Result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	cmd.Stdin = strings.NewReader("")
	return bermbin.Run(t, cmd)
}

// reachable makes path's directories traversable by every user (t.TempDir's are root's).
func reachable(t *testing.T, path string) {
	t.Helper()
	for d := path; d != "/" && d != "."; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Mode&0o001 == 0 {
			if err := os.Chmod(d, os.FileMode(st.Mode&0o777|0o011)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// aclled waits until bermd has given the socket its ACL (the users of the access file can
// connect once it has).
func aclled(t *testing.T, socket string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n, err := unix.Getxattr(socket, "system.posix_acl_access", nil); err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("bermd's socket has no ACL")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type accessSetup struct {
	d                     *bermd
	acme, beta, sec, none testUser
	dir, accessFile       string
	listed, unlisted      string // policy files
	acmeWS, betaWS        string
	bermBin               string
}

// setupAccess: real users and groups, an access file, and a bermd serving them.
//
//	acme: run by group berm-t-agents (user berm-t-acme), read by group berm-t-sec (user
//	      berm-t-sec), policies strict and LISTED
//	beta: run and read by user berm-t-beta
//	berm-t-none is in no tenant
func setupAccess(t *testing.T) *accessSetup {
	bermbin.RequireRoot(t)
	mkGroup(t, "berm-t-agents")
	mkGroup(t, "berm-t-sec")
	s := &accessSetup{}
	s.acme = mkUser(t, "berm-t-acme", "berm-t-agents")
	s.beta = mkUser(t, "berm-t-beta")
	s.sec = mkUser(t, "berm-t-sec", "berm-t-sec")
	s.none = mkUser(t, "berm-t-none")
	s.dir = t.TempDir()
	reachable(t, s.dir)
	strict, err := os.ReadFile(filepath.Join(bermbin.RepoRoot(), "agent/policy/strict.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s.listed, s.unlisted = filepath.Join(s.dir, "acme-web.yaml"), filepath.Join(s.dir, "mine.yaml")
	for _, p := range []string{s.listed, s.unlisted} {
		if err := os.WriteFile(p, strict, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.accessFile = filepath.Join(s.dir, "access.yaml")
	s.writeAccess(t, true)
	for _, w := range []struct {
		p *string
		u testUser
	}{{&s.acmeWS, s.acme}, {&s.betaWS, s.beta}} {
		*w.p = filepath.Join(s.dir, w.u.name+"-ws")
		if err := os.Mkdir(*w.p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(*w.p, int(w.u.uid), int(w.u.gid))
	}
	// The binaries' directory is root's (0700): the users execute them from a copy.
	bin := filepath.Join(s.dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, b := range []string{"berm", "berm-front", "berm-full"} {
		data, err := os.ReadFile(bermbin.Path(t, b))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.bermBin = filepath.Join(bin, "berm")
	s.d = startDaemon(t, "--access", s.accessFile)
	reachable(t, s.d.socket)
	aclled(t, s.d.socket)
	return s
}

// writeAccess writes the access file; withAcme false leaves acme's runners out.
func (s *accessSetup) writeAccess(t *testing.T, withAcme bool) {
	run := `["group:berm-t-agents"]`
	if !withAcme {
		run = `[]`
	}
	f := fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: Access
spec:
  tenants:
    - name: acme
      run: %s
      read: ["group:berm-t-sec"]
      policies: [strict, %s]
    - name: beta
      run: ["user:berm-t-beta"]
      read: ["user:berm-t-beta"]
`, run, s.listed)
	if err := os.WriteFile(s.accessFile, []byte(f), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *accessSetup) run(t *testing.T, u testUser, args ...string) bermbin.Result {
	t.Helper()
	r := u.as(t, s.dir, nil, s.bermBin, append([]string{"run", "--socket", s.d.socket}, args...)...)
	t.Logf("%s: berm run %q: exit %d\nstdout: %.300q\nstderr: %.500q", u.name, args, r.Exit, r.Stdout, r.Stderr)
	return r
}

// Callers that are not root, decided by bermd from their credentials: each gets what its
// tenant grants and nothing else, with a refusal that names the tenant and the right.
func TestAccessServesNonRootCallersByTenant(t *testing.T) {
	s := setupAccess(t)
	otherWS := filepath.Join(s.dir, "root-ws") // root's, writable by all: not the caller's own
	os.Mkdir(otherWS, 0o777)
	os.Chmod(otherWS, 0o777)
	link := filepath.Join(s.acmeWS, "to-beta") // acme's own symlink into beta's workspace
	os.Symlink(s.betaWS, link)
	os.Lchown(link, int(s.acme.uid), int(s.acme.gid))
	for _, tc := range []struct {
		name   string
		u      testUser
		args   []string
		exit   int
		stdout string
		stderr string
	}{
		{name: "a runner of acme runs in its only tenant, in its own workspace", u: s.acme,
			args: []string{"--call-id", "acc-1", "--workspace", s.acmeWS, "--", "/bin/sh", "-c", "echo hi $BERM_TENANT; id -u > mine"}, stdout: "hi acme\n"},
		{name: "a runner of acme runs in a fresh workspace bermd makes", u: s.acme,
			args: []string{"--call-id", "acc-2", "--", "/bin/sh", "-c", "echo fresh; exit 4"}, exit: 4, stdout: "fresh\n"},
		{name: "a runner of acme names a policy the tenant lists", u: s.acme,
			args: []string{"--call-id", "acc-3", "--policy", s.listed, "--workspace", s.acmeWS, "--", "/bin/true"}},
		{name: "a runner of acme may not run in beta", u: s.acme,
			args: []string{"--tenant", "beta", "--", "/bin/true"}, exit: 1, stderr: `no "run" right in tenant "beta"`},
		{name: "a policy the tenant does not list is refused", u: s.acme,
			args: []string{"--policy", s.unlisted, "--workspace", s.acmeWS, "--", "/bin/true"}, exit: 1, stderr: "policy " + s.unlisted + " is not one of the tenant's"},
		{name: "a workspace of another user is refused", u: s.acme,
			args: []string{"--workspace", s.betaWS, "--", "/bin/true"}, exit: 1, stderr: "not by the caller"},
		{name: "a symlink of the caller's own into another's workspace is refused", u: s.acme,
			args: []string{"--workspace", link, "--", "/bin/true"}, exit: 1, stderr: "workspace"},
		{name: "a workspace the caller can write but does not own is refused", u: s.acme,
			args: []string{"--workspace", otherWS, "--", "/bin/true"}, exit: 1, stderr: "owned by uid 0, not by the caller"},
		{name: "caps looser than the policy's are refused", u: s.acme,
			args: []string{"--memory", "64Gi", "--", "/bin/true"}, exit: 1, stderr: "--memory above the policy's cap"},
		{name: "a DNS upstream of the caller's choosing is refused (root's packets would go there)", u: s.acme,
			args: []string{"--dns-upstream", "127.0.0.1:5353", "--", "/bin/true"}, exit: 1, stderr: "only root names the call's DNS upstream"},
		{name: "caps tighter than the policy's are taken", u: s.acme,
			args: []string{"--memory", "256Mi", "--", "/bin/true"}},
		{name: "the runner of beta runs in beta", u: s.beta,
			args: []string{"--call-id", "acc-4", "--workspace", s.betaWS, "--", "/bin/echo", "beta"}, stdout: "beta\n"},
		{name: "a reader may not run", u: s.sec,
			args: []string{"--tenant", "acme", "--", "/bin/true"}, exit: 1, stderr: `no "run" right in tenant "acme"`},
		{name: "a user in no tenant cannot reach bermd", u: s.none,
			args: []string{"--", "/bin/true"}, exit: 1, stderr: "does not serve uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.d.settled(t)
			r := s.run(t, tc.u, tc.args...)
			if r.Exit != tc.exit || r.Stdout != tc.stdout || !strings.Contains(r.Stderr, tc.stderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q", r.Exit, r.Stdout, r.Stderr, tc.exit, tc.stdout, tc.stderr)
			}
		})
	}
	// The Go front (a terminal on stdin takes it) speaks the JSON request: the same decisions.
	goFront := filepath.Join(filepath.Dir(s.bermBin), "berm-front")
	for _, tc := range []struct {
		name   string
		args   []string
		exit   int
		stdout string
		stderr string
	}{
		{"the Go front runs a tenant's call in a workspace bermd makes", []string{"--call-id", "acc-go", "--", "/bin/sh", "-c", "echo go $BERM_TENANT; case $HOME in /run/berm/workspaces/acc-go-*) echo home;; esac"}, 0, "go acme\nhome\n", ""},
		{"the Go front is refused another tenant", []string{"--tenant", "beta", "--", "/bin/true"}, 1, "", `no "run" right in tenant "beta"`},
		{"the Go front is refused another's workspace", []string{"--workspace", s.betaWS, "--", "/bin/true"}, 1, "", "not by the caller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.acme.as(t, s.dir, nil, goFront, append([]string{"run", "--socket", s.d.socket}, tc.args...)...)
			if r.Exit != tc.exit || r.Stdout != tc.stdout || !strings.Contains(r.Stderr, tc.stderr) {
				t.Fatalf("exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q", r.Exit, r.Stdout, r.Stderr, tc.exit, tc.stdout, tc.stderr)
			}
		})
	}
	// The records: each call in the tenant bermd decided, the workspace's files its owner's.
	for id, tenant := range map[string]string{"acc-1": "acme", "acc-2": "acme", "acc-3": "acme", "acc-4": "beta", "acc-go": "acme"} {
		if c := s.d.call(t, id); c.Start.Tenant != tenant {
			t.Errorf("call %s recorded in tenant %q, want %q", id, c.Start.Tenant, tenant)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(s.acmeWS, "mine"), &st); err != nil || st.Uid != s.acme.uid {
		t.Errorf("the tool's file in acme's workspace: %v, uid %d, want %d", err, st.Uid, s.acme.uid)
	}

	// Reading the trail goes through bermd, which answers with the tenants the peer reads.
	env := []string{"BERM_SOCKET=" + s.d.socket}
	for _, tc := range []struct {
		name   string
		u      testUser
		args   []string
		exit   int
		has    []string
		hasNot []string
	}{
		{name: "acme's reader reads acme's timeline", u: s.sec, args: []string{"timeline", "acc-1"}, has: []string{"acc-1"}},
		{name: "acme's reader lists acme's calls only", u: s.sec, args: []string{"calls"}, has: []string{"acc-1", "acc-3"}, hasNot: []string{"acc-4"}},
		{name: "beta's reader may not read acme's timeline", u: s.beta, args: []string{"timeline", "acc-1"}, exit: 1, has: []string{`no "read" right in tenant "acme"`}},
		{name: "beta's reader may not read it by tenant/id either", u: s.beta, args: []string{"timeline", "acme/acc-1"}, exit: 1, has: []string{`no "read" right in tenant "acme"`}},
		{name: "beta's reader may not list acme's calls", u: s.beta, args: []string{"calls", "--tenant", "acme"}, exit: 1, has: []string{`no "read" right in tenant "acme"`}},
		{name: "beta's reader lists beta's calls only", u: s.beta, args: []string{"calls"}, has: []string{"acc-4"}, hasNot: []string{"acc-1"}},
		{name: "beta's reader's matrix is beta's", u: s.beta, args: []string{"matrix", "--json"}, has: []string{`"calls"`}},
		{name: "a runner without read reads nothing", u: s.acme, args: []string{"calls"}, exit: 1, has: []string{"no tenant grants it read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.u.as(t, s.dir, env, s.bermBin, tc.args...)
			out := r.Stdout + r.Stderr
			t.Logf("%s: berm %q: exit %d\n%.1000s", tc.u.name, tc.args, r.Exit, out)
			if r.Exit != tc.exit {
				t.Fatalf("exit %d, want %d", r.Exit, tc.exit)
			}
			for _, h := range tc.has {
				if !strings.Contains(out, h) {
					t.Errorf("output lacks %q", h)
				}
			}
			for _, h := range tc.hasNot {
				if strings.Contains(out, h) {
					t.Errorf("output has %q", h)
				}
			}
		})
	}
}

// A client that speaks the run protocol itself and lies (another tenant, a uid, root's
// fields) gets nothing its credentials do not grant: bermd reads the peer from the kernel.
func TestAccessIgnoresWhatTheClientSaysItIs(t *testing.T) {
	s := setupAccess(t)
	script := `
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
socket.send_fds(s, [b"R"], [0, 1, 2])
req = {"version": "1.0", "call_id": "liar-1", "tool": "t", "tenant": sys.argv[2], "argv": ["/bin/true"],
       "workspace": sys.argv[3], "env": [], "limits": {}, "uid": 0, "gid": 0, "peer": {"uid": 0}, "root": True}
s.sendall(json.dumps(req).encode() + b"\n")
print(s.makefile().readline())
`
	for _, tc := range []struct{ name, tenant, ws, want string }{
		{"another tenant named in the request", "beta", s.acmeWS, `no \"run\" right in tenant \"beta\"`},
		{"a tenant of its own with another's workspace", "acme", s.betaWS, "not by the caller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.acme.as(t, s.dir, nil, systemPython(t), "-c", script, s.d.socket, tc.tenant, tc.ws)
			t.Logf("exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
			if !strings.Contains(r.Stdout, tc.want) || strings.Contains(r.Stdout, `"record"`) {
				t.Fatalf("reply %q, want a refusal with %q and no record", r.Stdout, tc.want)
			}
		})
	}
}

// The access file is checked where it is wrong, at start and at reload; a reload with errors
// keeps the access in force, a good one replaces it.
func TestAccessFileErrorsAndReload(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: berm.dev/v1alpha1\nkind: Access\nspec:\n  tenants:\n    - name: acme\n      run: [\"user:no-such-user-berm\"]\n      raed: []\n"), 0o644)
	cmd := exec.Command(bermbin.Path(t, "bermd"), "--access", bad, "--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "st"), "--metrics", "")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	out := strings.ReplaceAll(errb.String(), `\"`, `"`) // slog quotes the error
	for _, want := range []string{bad + `:6:13: tenant acme.run: unknown user "no-such-user-berm"`, bad + `:7:7: spec.tenants[0]: unknown field "raed"`} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("bermd with a bad access file: %v\n%s\nwant %q", err, errb.String(), want)
		}
	}

	s := setupAccess(t)
	ok := []string{"--workspace", s.acmeWS, "--", "/bin/true"}
	if r := s.run(t, s.acme, ok...); r.Exit != 0 {
		t.Fatalf("before the reload: exit %d", r.Exit)
	}
	good, _ := os.ReadFile(s.accessFile)
	os.WriteFile(s.accessFile, []byte(strings.Replace(string(good), "kind: Access", "kind: Access\nbogus: 1", 1)), 0o644)
	s.d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, s.d, `access file not reloaded`)
	if !strings.Contains(strings.ReplaceAll(s.d.log.String(), `\"`, `"`), s.accessFile+`:3:1: unknown field "bogus"`) {
		t.Errorf("the reload's error does not say where:\n%s", s.d.log)
	}
	if r := s.run(t, s.acme, ok...); r.Exit != 0 {
		t.Fatalf("after a bad reload the access in force stays: exit %d", r.Exit)
	}
	s.writeAccess(t, false)
	s.d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, s.d, "access file reloaded")
	if r := s.run(t, s.acme, ok...); r.Exit == 0 || !strings.Contains(r.Stderr, "does not serve uid") {
		t.Fatalf("after a reload without acme's runners: exit %d %q", r.Exit, r.Stderr)
	}
	if r := s.run(t, s.beta, "--workspace", s.betaWS, "--", "/bin/true"); r.Exit != 0 {
		t.Fatalf("beta after the reload: exit %d", r.Exit)
	}
}

func waitLog(t *testing.T, d *bermd, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("bermd never logged %q:\n%s", s, d.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// systemPython is a python3 every user can execute (not a root-only shim such as pyenv's).
func systemPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o001 != 0 {
			return p
		}
	}
	t.Skip("no python3 every user can execute")
	return ""
}

// A caller swapping its workspace for another user's while its calls start (renames in a
// shared directory it may write, not sticky) never gets a call into the other's directory:
// bermd checks the owner of the directory the launcher holds, not the path.
func TestAccessWorkspaceSwapRaceRunsNothingInAnothersDirectory(t *testing.T) {
	s := setupAccess(t)
	shared := filepath.Join(s.dir, "shared")
	os.Mkdir(shared, 0o777)
	os.Chmod(shared, 0o777) // not sticky: acme may rename beta's directory in it
	mine, theirs := filepath.Join(shared, "ws"), filepath.Join(shared, "beta")
	os.Mkdir(mine, 0o755)
	os.Chown(mine, int(s.acme.uid), int(s.acme.gid))
	os.Mkdir(theirs, 0o777) // open, so that a call landing there could leave its marker
	os.Chmod(theirs, 0o777)
	os.Chown(theirs, int(s.beta.uid), int(s.beta.gid))
	stop := filepath.Join(s.dir, "stop-swapping")
	swapper := exec.Command(systemPython(t), "-c", `
import os, sys
d, stop = sys.argv[1], sys.argv[2]
ws, beta, tmp = d + "/ws", d + "/beta", d + "/tmp"
while not os.path.exists(stop):
    try:
        os.rename(ws, tmp); os.rename(beta, ws)   # beta's directory at the workspace's path
        os.rename(ws, beta); os.rename(tmp, ws)   # and back
    except OSError:
        pass
`, shared, stop)
	swapper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: s.acme.uid, Gid: s.acme.gid, Groups: s.acme.groups}}
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(stop, nil, 0o644)
		swapper.Wait()
	}()
	ran, refused := 0, 0
	for i := range 40 {
		r := s.acme.as(t, s.dir, nil, s.bermBin, "run", "--socket", s.d.socket, "--workspace", mine, "--", "/bin/sh", "-c", fmt.Sprintf("touch marker-%d", i))
		switch {
		case r.Exit == 0:
			ran++
		case r.Exit == 1 && strings.HasPrefix(r.Stderr, "berm: "):
			refused++ // beta's directory (not the caller's), or none at the path mid-swap
		default:
			t.Fatalf("call %d: exit %d %q", i, r.Exit, r.Stderr)
		}
	}
	os.WriteFile(stop, nil, 0o644)
	swapper.Wait()
	entries, _ := os.ReadDir(theirs)
	if _, err := os.Stat(filepath.Join(shared, "tmp")); err == nil {
		entries2, _ := os.ReadDir(filepath.Join(shared, "ws")) // left mid-swap: ws is beta's
		entries = append(entries, entries2...)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "marker-") {
			t.Fatalf("a call ran in beta's directory: %s", e.Name())
		}
	}
	t.Logf("%d calls ran in acme's directory, %d were refused on beta's", ran, refused)
	if refused == 0 {
		t.Log("the swap never landed on a call's check: the race was not exercised this run")
	}
}
