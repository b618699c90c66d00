package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// A caller granted tenant door-a (read and decide, through a group) cannot read, follow or
// decide door-b's calls by any command: each is refused naming the tenant and the right, or
// door-b is absent from what it gets (its call ids, keys, tools and requests included). Real
// users, a real bermd, real calls in both tenants, a request held in each.
func TestDoorNoCommandCrossesTenants(t *testing.T) {
	s := setupDoor(t)
	s.call(t, s.aRun, "door-a", "door-x-a1", "/bin/echo", "a1")
	s.call(t, s.aRun, "door-a", "door-x-same", "/bin/echo", "a-same")
	s.call(t, s.bAll, "door-b", "door-x-b1", "/bin/echo", "b1")
	s.call(t, s.bAll, "door-b", "door-x-same", "/bin/echo", "b-same")
	s.held(t, s.aRun, "door-a", "door-x-aheld")
	s.held(t, s.bAll, "door-b", "door-x-bheld")
	p := s.pending(t, "door-x-aheld", "door-x-bheld")
	aHeld, bHeld := p["door-x-aheld"].ID, p["door-x-bheld"].ID
	// door-b's call key, as root reads it.
	rep, err := callproto.Read(s.d.socket, &callproto.ReadRequest{Read: callproto.ReadCalls, Tenant: "door-b"})
	if err != nil {
		t.Fatal(err)
	}
	var bCalls []audit.Call
	if err := json.Unmarshal(rep.Calls, &bCalls); err != nil {
		t.Fatal(err)
	}
	bKey := ""
	for _, c := range bCalls {
		if c.Start.CallID == "door-x-b1" {
			bKey = c.Start.Key()
		}
	}
	if bKey == "" {
		t.Fatalf("door-x-b1 is not among root's calls of door-b: %s", rep.Calls)
	}

	noRead := `access: uid ` + itoa(s.aSec.uid) + ` has no "read" right in tenant "door-b"`
	noDecide := "no pending approval with this id in the tenants uid " + itoa(s.aSec.uid) + " may decide (door-a)"
	b := []string{"door-b", "door-x-b", bKey, bHeld} // nothing of door-b's, in any output that is not a refusal
	for _, tc := range []struct {
		name   string
		args   []string
		follow bool // berm events --follow, while door-b and then door-a run a call
		exit   int
		has    []string
		hasNot []string
	}{
		{name: "calls lists door-a's calls only", args: []string{"calls"}, has: []string{"door-x-a1", "door-x-same"}, hasNot: b},
		{name: "calls of door-b is refused", args: []string{"calls", "--tenant", "door-b"}, exit: 1, has: []string{noRead}},
		{name: "calls of door-b's tool lists nothing", args: []string{"calls", "--tool", "door-b-tool", "--json"}, has: []string{"[]"}, hasNot: b},
		{name: "timeline of door-b's call id is refused", args: []string{"timeline", "door-x-b1"}, exit: 1, has: []string{noRead}},
		{name: "timeline of door-b's TENANT/ID is refused", args: []string{"timeline", "door-b/door-x-b1"}, exit: 1, has: []string{noRead}},
		{name: "timeline of door-b's call key is refused", args: []string{"timeline", bKey}, exit: 1, has: []string{noRead}},
		{name: "timeline of an id both tenants have is door-a's", args: []string{"timeline", "door-x-same", "--json"}, has: []string{`"door-a"`}, hasNot: b},
		{name: "matrix is door-a's", args: []string{"matrix", "--json"}, has: []string{"door-a-tool"}, hasNot: b},
		{name: "matrix of door-b is refused", args: []string{"matrix", "--tenant", "door-b"}, exit: 1, has: []string{noRead}},
		{name: "approvals lists door-a's request only", args: []string{"approvals", "--json"}, has: []string{aHeld}, hasNot: b},
		{name: "approve of door-b's request is an unknown id", args: []string{"approve", bHeld}, exit: 1, has: []string{noDecide}, hasNot: []string{"door-b"}},
		{name: "deny of door-b's request is an unknown id", args: []string{"deny", bHeld, "--reason", "mine now"}, exit: 1, has: []string{noDecide}, hasNot: []string{"door-b"}},
		{name: "events are door-a's", args: []string{"events"}, has: []string{"door-x-a1"}, hasNot: b},
		{name: "events of door-b are refused", args: []string{"events", "--tenant", "door-b"}, exit: 1, has: []string{noRead}},
		{name: "events of door-b's TENANT/ID are refused", args: []string{"events", "--call", "door-b/door-x-b1"}, exit: 1, has: []string{noRead}},
		{name: "events of door-b's call id are none", args: []string{"events", "--call", "door-x-b1"}, hasNot: b},
		{name: "events of door-b's call key are none", args: []string{"events", "--call", bKey}, hasNot: b},
		{name: "events of door-b's tool are none", args: []string{"events", "--tool", "door-b-tool"}, hasNot: b},
		{name: "events of an id both tenants have are door-a's", args: []string{"events", "--call", "door-x-same"}, has: []string{`"door-a"`}, hasNot: b},
		{name: "tetragon events are door-a's", args: []string{"events", "--format", "tetragon"}, has: []string{"door-x-a1"}, hasNot: b},
		{name: "a follow gets door-a's new events and none of door-b's", follow: true, has: []string{"door-x-af"}, hasNot: b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out string
			if tc.follow {
				f := s.follow(t, s.aSec)
				f.waitFor(t, `"door-x-a1"`)
				// door-b's call is journaled before door-a's: had it reached the follow, it
				// would be there by the time door-a's is.
				s.call(t, s.bAll, "door-b", "door-x-bf", "/bin/echo", "bf")
				s.call(t, s.aRun, "door-a", "door-x-af", "/bin/echo", "af")
				f.waitFor(t, `"door-x-af"`)
				if code := f.stop(t); code != tc.exit {
					t.Fatalf("exit %d, want %d: %s", code, tc.exit, f.errb.String())
				}
				out = f.text() + f.errb.String()
			} else {
				r := s.berm(t, s.aSec, tc.args...)
				if r.Exit != tc.exit {
					t.Fatalf("exit %d, want %d", r.Exit, tc.exit)
				}
				out = r.Stdout + r.Stderr
			}
			for _, h := range tc.has {
				if !strings.Contains(out, h) {
					t.Errorf("output lacks %q", h)
				}
			}
			for _, h := range tc.hasNot {
				if strings.Contains(out, h) {
					t.Errorf("output has %q:\n%.3000s", h, out)
				}
			}
		})
	}
	// door-b's request still waits: nothing door-a's caller did decided it.
	if p := s.pending(t, "door-x-bheld"); p["door-x-bheld"].ID != bHeld {
		t.Fatalf("door-b's request: %+v", p)
	}
	for _, id := range []string{aHeld, bHeld} {
		if _, err := callproto.Decide(s.d.socket, &callproto.DecideRequest{ID: id, Decision: callproto.Deny}); err != nil {
			t.Errorf("root denies %s through bermd: %v", id, err)
		}
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
