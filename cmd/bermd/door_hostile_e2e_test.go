package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/testenv/bermbin"
)

// flood is a tool that leaves thousands of events in the trail.
var flood = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 1500 ]; do /bin/true; i=$((i+1)); done; echo flooded"}

// rawRequest connects to bermd, sends magic and body (with fds, when given) in one sendmsg and
// returns the connection.
func rawRequest(t *testing.T, socket string, magic byte, body string, fds ...int) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(append([]byte{magic}, body...), oob, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// A follower that never reads, and garbage on the new requests, hold up no other caller and
// do not bring bermd down: each bad request gets an error, the callers around it are served.
func TestDoorHostileCallersLeaveBermdServing(t *testing.T) {
	s := setupDoor(t, "--reader-stall", "10m")
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fd := int(devnull.Fd())
	for _, tc := range []struct {
		name  string
		magic byte
		body  string
		fds   []int
		want  string
	}{
		{"a decide request that is not JSON", 'D', "approve it please\n", nil, "decide request: invalid character"},
		{"a decide request of no decision", 'D', `{"id": "x", "decision": "maybe"}` + "\n", nil, `decision: expected "approve" or "deny", got "maybe"`},
		{"a decide request of another major version", 'D', `{"version": "2.0", "id": "x", "decision": "approve"}` + "\n", nil, "protocol version 2.0 not supported"},
		{"a decide request past 64 KiB", 'D', `{"id": "` + strings.Repeat("a", 80<<10) + `", "decision": "deny"}` + "\n", nil, "decide request: unexpected EOF"},
		{"a decide request of an id nobody holds", 'D', `{"id": "\u001b[2Jnope", "decision": "approve"}` + "\n", nil, `approval \x1b[2Jnope: no pending approval with this id`},
		{"a decide request with descriptors", 'D', `{"id": "x", "decision": "approve"}` + "\n", []int{fd, fd, fd}, "expected a run request"},
		{"an events request of an unknown kind", 'Q', `{"read": "events", "kinds": ["exec", "nope"]}` + "\n", nil, `events: unknown kind "nope"`},
		{"an events request with a since that is not a time", 'Q', `{"read": "events", "since": "yesterday"}` + "\n", nil, "read request: parsing time"},
		{"a read of something else", 'Q', `{"read": "secrets"}` + "\n", nil, `got "secrets"`},
		{"an events request cut short", 'Q', `{"read": "events", "follow": tr`, nil, "read request: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawRequest(t, s.d.socket, tc.magic, tc.body, tc.fds...)
			if strings.HasSuffix(tc.body, "tr") {
				c.CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(time.Minute)) // a hung bermd fails the test, not the run
			line, err := bufio.NewReader(c).ReadString('\n')
			var rep struct{ Error string }
			if err != nil || json.Unmarshal([]byte(line), &rep) != nil || !strings.Contains(rep.Error, tc.want) {
				t.Fatalf("reply %q (%v), want an error with %q", line, err, tc.want)
			}
		})
	}

	t.Run("a follower that never reads holds up no other caller", func(t *testing.T) {
		stuck := rawRequest(t, s.d.socket, 'Q', `{"version": "1.2", "read": "events", "follow": true}`+"\n")
		s.call(t, s.aRun, "door-a", "door-h-flood", flood...)
		// Every other caller is served while the follower sits on what bermd wrote it.
		if r := s.call(t, s.bAll, "door-b", "door-h-b1", "/bin/echo", "b"); r.Stdout != "b\n" {
			t.Fatalf("door-b's call beside the stuck follower: %+v", r)
		}
		if r := s.berm(t, s.bAll, "calls"); r.Exit != 0 || !strings.Contains(r.Stdout, "door-h-b1") {
			t.Fatalf("berm calls beside the stuck follower: exit %d", r.Exit)
		}
		all := s.berm(t, s.aSec, "events", "--call", "door-h-flood")
		if all.Exit != 0 || !strings.Contains(all.Stdout, "door-h-flood") {
			t.Fatalf("berm events beside the stuck follower: exit %d", all.Exit)
		}
		if r := s.berm(t, s.aDec, "approvals"); r.Exit != 0 {
			t.Fatalf("berm approvals beside the stuck follower: exit %d", r.Exit)
		}
		raw, _ := stuck.SyscallConn()
		queued := 0
		raw.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		t.Logf("the stuck follower has %d bytes waiting; the flood's events alone are %d", queued, len(all.Stdout))
		if queued >= len(all.Stdout) {
			t.Fatalf("the follower was sent everything (%d bytes queued): the flood did not fill its socket", queued)
		}
	})
}

// A follower that stops reading is dropped after --reader-stall: bermd logs it, closes its
// connection (with an error line when it fits), and goes on serving.
func TestDoorStalledFollowerIsDropped(t *testing.T) {
	d := startDaemon(t, "--reader-stall", "2s")
	stuck := rawRequest(t, d.socket, 'Q', `{"version": "1.2", "read": "events", "follow": true}`+"\n")
	ws := bermbin.Workspace(t)
	if r := d.run(t, "", append([]string{"--call-id", "door-drop-flood", "--workspace", ws, "--"}, flood...)...); r.Exit != 0 {
		t.Fatalf("flood: %+v", r)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(d.log.String(), "events reader dropped") {
		if time.Now().After(deadline) {
			t.Fatalf("bermd never dropped the follower that does not read:\n%s", d.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What was written before the drop is there to read; then the connection's end.
	stuck.SetReadDeadline(time.Now().Add(2 * time.Minute))
	got, err := io.ReadAll(stuck)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the dropped follower's connection stays open")
		}
		t.Fatal(err)
	}
	lines := bytes.Count(got, []byte("\n"))
	t.Logf("the dropped follower read %d bytes, %d lines; its last: %.200q", len(got), lines, got[max(0, len(got)-200):])
	if lines == 0 {
		t.Fatal("the follower got nothing before its drop")
	}
	if r := d.run(t, "", "--call-id", "door-drop-after", "--", "/bin/echo", "after"); r.Exit != 0 || r.Stdout != "after\n" {
		t.Fatalf("a call after the drop: %+v", r)
	}
}
