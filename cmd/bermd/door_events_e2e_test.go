package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
)

// follower is `berm events --follow` running as a user: its output as it comes.
type follower struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
	errb strings.Builder
}

func (s *doorSetup) follow(t *testing.T, u testUser, args ...string) *follower {
	t.Helper()
	f := &follower{done: make(chan struct{})}
	f.cmd = exec.Command(s.bermBin, append([]string{"events", "--follow"}, args...)...)
	f.cmd.Dir = s.dir
	f.cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/", "LANG=C.UTF-8"}, s.env...)
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	f.cmd.Stderr = &f.errb
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.out.WriteString(sc.Text() + "\n")
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		f.cmd.Process.Kill()
		f.cmd.Wait()
	})
	return f
}

func (f *follower) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out.String()
}

// waitFor waits until the follower has written s.
func (f *follower) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(f.text(), s) {
		select {
		case <-f.done:
			t.Fatalf("berm events --follow ended before %q: %s\n%s", s, f.errb.String(), f.text())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("berm events --follow never wrote %q:\n%s", s, f.text())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop interrupts the follower as a person would (^C) and returns its exit status.
func (f *follower) stop(t *testing.T) int {
	t.Helper()
	f.cmd.Process.Signal(os.Interrupt)
	<-f.done
	err := f.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return 0
}

// berm events reaches a reader that is not root through bermd: its tenants' events as JSON
// lines, with --call, --kind, --since and --format tetragon, and --follow until it stops.
func TestDoorEventsReachReadersThroughBermd(t *testing.T) {
	s := setupDoor(t)
	s.call(t, s.aRun, "door-a", "door-ev-a1", "/bin/sh", "-c", "cat /etc/hostname >/dev/null; echo a1")
	s.call(t, s.aRun, "door-a", "door-ev-a2", "/bin/echo", "a2")
	s.call(t, s.bAll, "door-b", "door-ev-b1", "/bin/echo", "b1")
	lines := func(t *testing.T, out string) []event.Event {
		var evs []event.Event
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if l == "" {
				continue
			}
			var e event.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("a line that is not an event: %q: %v", l, err)
			}
			evs = append(evs, e)
		}
		return evs
	}
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, evs []event.Event)
	}{
		{"the reader gets its tenant's events", []string{"events"}, func(t *testing.T, evs []event.Event) {
			calls := map[string]bool{}
			for _, e := range evs {
				calls[e.CallID] = true
			}
			if !calls["door-ev-a1"] || !calls["door-ev-a2"] {
				t.Errorf("calls %v, want door-ev-a1 and door-ev-a2", calls)
			}
		}},
		{"--call keeps one call", []string{"events", "--call", "door-ev-a2"}, func(t *testing.T, evs []event.Event) {
			for _, e := range evs {
				if e.CallID != "door-ev-a2" {
					t.Errorf("an event of %s", e.CallID)
				}
			}
			if len(evs) == 0 {
				t.Error("no event of door-ev-a2")
			}
		}},
		{"--kind keeps the kinds", []string{"events", "--kind", "exec"}, func(t *testing.T, evs []event.Event) {
			for _, e := range evs {
				if e.Kind != event.KindExec {
					t.Errorf("an event of kind %s", e.Kind)
				}
			}
			if len(evs) == 0 {
				t.Error("no exec event")
			}
		}},
		{"--since in the future keeps nothing", []string{"events", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, func(t *testing.T, evs []event.Event) {
			if len(evs) != 0 {
				t.Errorf("%d events", len(evs))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.berm(t, s.aSec, tc.args...)
			if r.Exit != 0 {
				t.Fatalf("exit %d: %s", r.Exit, r.Stderr)
			}
			evs := lines(t, r.Stdout)
			for _, e := range evs {
				if e.Tenant != "door-a" {
					t.Fatalf("an event of tenant %q reached door-a's reader: %+v", e.Tenant, e)
				}
			}
			tc.check(t, evs)
		})
	}
	t.Run("--format tetragon is written on the client's side", func(t *testing.T) {
		r := s.berm(t, s.aSec, "events", "--format", "tetragon", "--call", "door-ev-a1")
		if r.Exit != 0 || !strings.Contains(r.Stdout, "process_exec") || !strings.Contains(r.Stdout, "door-ev-a1") {
			t.Fatalf("exit %d: %.500s %s", r.Exit, r.Stdout, r.Stderr)
		}
	})
	t.Run("--follow streams new events until the reader stops", func(t *testing.T) {
		f := s.follow(t, s.aSec)
		f.waitFor(t, `"door-ev-a2"`) // what is stored first
		s.call(t, s.aRun, "door-a", "door-ev-a3", "/bin/echo", "a3")
		f.waitFor(t, `"door-ev-a3"`)
		if code := f.stop(t); code != 0 {
			t.Fatalf("berm events --follow interrupted: exit %d %s", code, f.errb.String())
		}
	})
}
