package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/callproto"
	"github.com/bermsec/berm/testenv/bermbin"
)

// doorSetup is a bermd with an access file of two tenants, real users and a group, and an
// approvals policy both tenants may name:
//
//	door-a: run by user berm-d-arun; read by group berm-d-asec (user berm-d-asec); decide by
//	        group berm-d-asec and user berm-d-adec
//	door-b: run, read and decide by user berm-d-ball
type doorSetup struct {
	d                      *bermd
	aRun, aSec, aDec, bAll testUser
	dir, pol, bermBin      string
	env                    []string
}

func setupDoor(t *testing.T, extra ...string) *doorSetup {
	t.Helper()
	bermbin.RequireRoot(t)
	mkGroup(t, "berm-d-asec")
	s := &doorSetup{}
	s.aRun = mkUser(t, "berm-d-arun")
	s.aSec = mkUser(t, "berm-d-asec", "berm-d-asec")
	s.aDec = mkUser(t, "berm-d-adec")
	s.bAll = mkUser(t, "berm-d-ball")
	s.dir = t.TempDir()
	reachable(t, s.dir)
	s.pol = filepath.Join(s.dir, "held.yaml")
	if err := os.WriteFile(s.pol, []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: door-held}
spec:
  approvals:
    timeout: 5m
    rules:
      - name: delete-reports
        match: {unlink: "${WORKSPACE}/reports/**"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	accessFile := filepath.Join(s.dir, "access.yaml")
	if err := os.WriteFile(accessFile, []byte(fmt.Sprintf(`apiVersion: berm.dev/v1alpha1
kind: Access
spec:
  tenants:
    - name: door-a
      run: ["user:berm-d-arun"]
      read: ["group:berm-d-asec"]
      decide: ["group:berm-d-asec", "user:berm-d-adec"]
      policies: [strict, %[1]s]
    - name: door-b
      run: ["user:berm-d-ball"]
      read: ["user:berm-d-ball"]
      decide: ["user:berm-d-ball"]
      policies: [strict, %[1]s]
`, s.pol)), 0o644); err != nil {
		t.Fatal(err)
	}
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
	s.d = startDaemon(t, append([]string{"--access", accessFile,
		"--approvals-dir", filepath.Join(s.dir, "api"), "--approvals-token", filepath.Join(s.dir, "approvals.token")}, extra...)...)
	reachable(t, s.d.socket)
	aclled(t, s.d.socket)
	s.env = []string{"BERM_SOCKET=" + s.d.socket}
	return s
}

// workspace is a workspace of u's own, with reports/x in it.
func (s *doorSetup) workspace(t *testing.T, u testUser, id string) string {
	t.Helper()
	ws := filepath.Join(s.dir, id+"-ws")
	if err := os.MkdirAll(filepath.Join(ws, "reports"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "reports", "x"), []byte(id), 0o644)
	for _, p := range []string{ws, filepath.Join(ws, "reports"), filepath.Join(ws, "reports", "x")} {
		os.Chown(p, int(u.uid), int(u.gid))
	}
	return ws
}

// call runs a call of u's in tenant to its end (tool TENANT-tool).
func (s *doorSetup) call(t *testing.T, u testUser, tenant, id string, argv ...string) bermbin.Result {
	t.Helper()
	r := u.as(t, s.dir, nil, s.bermBin, append([]string{"run", "--socket", s.d.socket, "--tenant", tenant, "--tool", tenant + "-tool",
		"--call-id", id, "--workspace", s.workspace(t, u, id), "--"}, argv...)...)
	if r.Exit != 0 {
		t.Fatalf("%s: call %s: exit %d %s", u.name, id, r.Exit, r.Stderr)
	}
	return r
}

// held starts a call of u's in tenant whose `rm reports/x` waits for a decision.
func (s *doorSetup) held(t *testing.T, u testUser, tenant, id string) (string, chan bermbin.Result) {
	t.Helper()
	ws := s.workspace(t, u, id)
	cmd := exec.Command(s.bermBin, "run", "--socket", s.d.socket, "--tenant", tenant, "--tool", tenant+"-tool", "--call-id", id,
		"--workspace", ws, "--policy", s.pol, "--", "sh", "-c", "rm reports/x; echo rm=$?")
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	cmd.Stdin = strings.NewReader("")
	return ws, bermbin.Start(t, cmd)
}

// pending waits (as root, through bermd) until a request of each call waits, and returns them
// by call id.
func (s *doorSetup) pending(t *testing.T, ids ...string) map[string]approval.PendingView {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rep, err := callproto.Read(s.d.socket, &callproto.ReadRequest{Read: callproto.ReadApprovals})
		if err != nil {
			t.Fatal(err)
		}
		var list []approval.PendingView
		if err := json.Unmarshal(rep.Approvals, &list); err != nil {
			t.Fatal(err)
		}
		got := map[string]approval.PendingView{}
		for _, p := range list {
			got[p.CallID] = p
		}
		all := true
		for _, id := range ids {
			_, ok := got[id]
			all = all && ok
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests of %v never all pending: %+v", ids, list)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// berm runs the berm CLI as u, reaching bermd through $BERM_SOCKET.
func (s *doorSetup) berm(t *testing.T, u testUser, args ...string) bermbin.Result {
	t.Helper()
	r := u.as(t, s.dir, s.env, s.bermBin, args...)
	t.Logf("%s: berm %q: exit %d\nstdout: %.2000s\nstderr: %.1000s", u.name, args, r.Exit, r.Stdout, r.Stderr)
	return r
}

// The decide right reaches a user that is not root through bermd: a decider of door-a lists
// door-a's held request and approves it (the tool's delete happens), a decider of door-b
// denies door-b's; each is recorded as who the kernel says decided. A decider may not run, a
// runner may not decide, and root's API keeps seeing and deciding everything.
func TestDoorDecideRightReachesUsersThroughBermd(t *testing.T) {
	s := setupDoor(t)
	aWS, aDone := s.held(t, s.aRun, "door-a", "door-dec-a")
	bWS, bDone := s.held(t, s.bAll, "door-b", "door-dec-b")
	p := s.pending(t, "door-dec-a", "door-dec-b")
	aID, bID := p["door-dec-a"].ID, p["door-dec-b"].ID

	// Root's approval API (the token) still lists both.
	api := []string{"--dir", filepath.Join(s.dir, "api"), "--token", filepath.Join(s.dir, "approvals.token")}
	if r := bermbin.Berm(t, nil, append([]string{"approvals", "--json"}, api...)...); r.Exit != 0 || !strings.Contains(r.Stdout, aID) || !strings.Contains(r.Stdout, bID) {
		t.Fatalf("root's berm approvals over the API: exit %d %s %s", r.Exit, r.Stdout, r.Stderr)
	}
	for _, tc := range []struct {
		name   string
		u      testUser
		args   []string
		exit   int
		has    []string
		hasNot []string
	}{
		{name: "a decider of door-a lists door-a's request", u: s.aDec, args: []string{"approvals", "--json"}, has: []string{aID, `"tenant": "door-a"`}, hasNot: []string{bID, "door-b"}},
		{name: "a decider of door-a sees the table", u: s.aDec, args: []string{"approvals"}, has: []string{"ID", "TENANT", aID, "delete-reports"}, hasNot: []string{bID}},
		{name: "a decider may not run", u: s.aDec, args: []string{"run", "--socket", s.d.socket, "--tenant", "door-a", "--", "/bin/true"}, exit: 1, has: []string{`no "run" right in tenant "door-a"`}},
		{name: "a decider may not read the trail", u: s.aDec, args: []string{"calls"}, exit: 1, has: []string{"no tenant grants it read"}},
		{name: "a runner may not list approvals", u: s.aRun, args: []string{"approvals"}, exit: 1, has: []string{"no tenant grants it decide"}},
		{name: "a runner may not approve its own call's request", u: s.aRun, args: []string{"approve", aID}, exit: 1, has: []string{"no tenant grants it decide"}},
		{name: "only root names who decides", u: s.aDec, args: []string{"approve", aID, "--by", "root"}, exit: 1, has: []string{"only root names who decides"}},
		{name: "a decider of door-a approves door-a's request", u: s.aDec, args: []string{"approve", aID, "--reason", "door ok"}},
		{name: "the decider of door-b denies door-b's request", u: s.bAll, args: []string{"deny", bID, "--reason", "door no"}},
		{name: "a decided request is gone", u: s.aDec, args: []string{"approve", aID}, exit: 1, has: []string{"no pending approval with this id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.berm(t, tc.u, tc.args...)
			out := r.Stdout + r.Stderr
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
	if t.Failed() {
		return // the held calls would wait for their timeout
	}
	ra, rb := <-aDone, <-bDone
	if _, err := os.Stat(filepath.Join(aWS, "reports", "x")); err == nil || !strings.Contains(ra.Stdout, "rm=0") {
		t.Errorf("door-a's approved delete did not happen: %+v", ra)
	}
	if _, err := os.Stat(filepath.Join(bWS, "reports", "x")); err != nil || !strings.Contains(rb.Stdout, "rm=1") {
		t.Errorf("door-b's denied delete happened: %+v %v", rb, err)
	}
	for _, tc := range []struct{ call, outcome, by, reason string }{
		{"door-a/door-dec-a", approval.Approved, "user:berm-d-adec", "door ok"},
		{"door-b/door-dec-b", approval.Denied, "user:berm-d-ball", "door no"},
	} {
		var got *event.Approval
		for _, e := range bermbin.Timeline(t, s.d.state, tc.call).Events {
			if e.Approval != nil && e.Approval.Outcome != "requested" {
				got = e.Approval
			}
		}
		if got == nil || got.Outcome != tc.outcome || got.By != tc.by || got.Reason != tc.reason {
			t.Errorf("%s: decision in the trail %+v, want %s by %s (%s)", tc.call, got, tc.outcome, tc.by, tc.reason)
		}
	}
}
