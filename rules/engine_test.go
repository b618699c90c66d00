package rules

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bermsec/berm/agent/event"
)

func mountEvent(call string, seq uint64) *event.Event {
	return &event.Event{CallID: call, Seq: seq, Time: time.Unix(1000, int64(seq)), Kind: event.KindSyscall,
		Tool: "tool", Tenant: "t1", PID: 42, TID: 43, PPID: 41, UID: 65534, Comm: "python3", Exe: "/usr/bin/python3",
		Syscall: &event.Syscall{Name: "mount", Nr: 165, Path: "/mnt", Path2: "/dev/sda1", Result: -1, Errno: "EPERM"}}
}

func TestAlertEvent(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	eng := NewEngine(set, reg)
	ev := mountEvent("c1", 7)
	alerts := eng.Eval(ev)
	if len(alerts) != 1 {
		t.Fatalf("alerts: %+v", alerts)
	}
	a := alerts[0]
	if a.Kind != event.KindAlert || a.Seq != 0 || a.CallID != "c1" || a.Tool != "tool" || a.Tenant != "t1" || a.PID != 42 || !a.Time.Equal(ev.Time) {
		t.Errorf("alert event: %+v", a)
	}
	want := event.Alert{RuleID: "escape-mount", Title: "Mount operation from the tool", Severity: "high", Surface: "isolation",
		Technique: []string{"T1611"}, Output: "mount /dev/sda1 on /mnt by /usr/bin/python3 (pid 42) -> EPERM", EventSeq: 7}
	if a.Alert.RuleID != want.RuleID || a.Alert.Output != want.Output || a.Alert.EventSeq != 7 || a.Alert.Severity != want.Severity ||
		a.Alert.Surface != want.Surface || strings.Join(a.Alert.Technique, ",") != "T1611" || a.Alert.Title != want.Title {
		t.Errorf("alert:\n got %+v\nwant %+v", *a.Alert, want)
	}
	if got := testutil.ToFloat64(eng.m.alerts.WithLabelValues("escape-mount", "high", "isolation")); got != 1 {
		t.Errorf("berm_alerts_total = %v", got)
	}
	// Alerts are not evaluated again.
	if out := eng.Eval(&a); out != nil {
		t.Errorf("alert evaluated: %+v", out)
	}
	// berm's own setup is not the tool's.
	setup := mountEvent("c1", 8)
	setup.UID, setup.Comm, setup.Exe = 0, "berm", "/usr/local/bin/berm"
	if out := eng.Eval(setup); len(out) != 0 {
		t.Errorf("setup mount alerted: %+v", out)
	}
}

func unlinkEvent(call string, seq uint64, at time.Time) *event.Event {
	return &event.Event{CallID: call, CallKey: "key-" + call, Seq: seq, Time: at, Kind: event.KindSyscall, UID: 65534,
		Syscall: &event.Syscall{Name: "unlinkat", Path: "f", Result: 0}}
}

// Two calls with the same caller id (two tenants, or an id reused) are two calls: their
// windows are kept by call key, apart.
func TestWindowPerCallKeyNotCallerID(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	eng := NewEngine(subset(set, "destructive-deletion-storm"), nil)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 499; i++ {
		for _, key := range []string{"k1", "k2"} {
			ev := unlinkEvent("same-id", uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))
			ev.CallKey = key
			if n := len(eng.Eval(ev)); n != 0 {
				t.Fatalf("two calls' 499 deletions each fired as one call's 998 (at %d)", i)
			}
		}
	}
}

// Windows count per call, fire once per window, and end with the call.
func TestWindowPerCall(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	eng := NewEngine(subset(set, "destructive-deletion-storm"), nil)
	t0 := time.Unix(1000, 0)
	fired := map[string]int{}
	for i := 0; i < 499; i++ {
		for _, call := range []string{"a", "b"} {
			fired[call] += len(eng.Eval(unlinkEvent(call, uint64(i+1), t0.Add(time.Duration(i)*time.Millisecond))))
		}
	}
	if fired["a"]+fired["b"] != 0 {
		t.Fatalf("fired before 500 deletions in one call: %v", fired)
	}
	// The 500th deletion of call a fires; call b's state was kept apart.
	if n := len(eng.Eval(unlinkEvent("a", 500, t0.Add(500*time.Millisecond)))); n != 1 {
		t.Fatalf("500th deletion: %d alerts", n)
	}
	// More deletions within the same window do not fire again.
	for i := 0; i < 600; i++ {
		if n := len(eng.Eval(unlinkEvent("a", uint64(501+i), t0.Add(time.Duration(501+i)*time.Millisecond)))); n != 0 {
			t.Fatalf("fired again inside the window at %d", i)
		}
	}
	// Ending call b drops its 99 counted deletions.
	eng.EndCall("key-b")
	if n := len(eng.Eval(unlinkEvent("b", 500, t0.Add(500*time.Millisecond)))); n != 0 {
		t.Fatal("call b's window survived EndCall")
	}
	// Deletions spread wider than the window never fire.
	for i := 0; i < 1000; i++ {
		if n := len(eng.Eval(unlinkEvent("c", uint64(i+1), t0.Add(time.Duration(i)*50*time.Millisecond)))); n != 0 {
			t.Fatalf("slow deletions fired at %d", i)
		}
	}
}

// Swap under concurrent Eval: no race (go test -race), and the new set takes effect.
func TestSwapConcurrent(t *testing.T) {
	full, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	none := subset(full, "kernel-bpf")
	eng := NewEngine(full, nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			eng.Eval(mountEvent("c", uint64(i)))
		}
	}()
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			eng.Swap(none)
		} else {
			eng.Swap(full)
		}
	}
	close(stop)
	wg.Wait()
	eng.Swap(none)
	if n := len(eng.Eval(mountEvent("c", 1))); n != 0 {
		t.Errorf("old set still active after Swap: %d alerts", n)
	}
}

// Hot reload: a good change is picked up, a broken file keeps the previous set and is reported.
func TestWatchReload(t *testing.T) {
	old := WatchInterval
	WatchInterval = 20 * time.Millisecond
	defer func() { WatchInterval = old }()
	dir := t.TempDir()
	p := writeFile(t, dir, "r.yaml", goodRule)
	set, err := LoadFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	eng := NewEngine(set, reg)
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { Watch(ctx, []string{dir}, eng, log); close(done) }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				logMu.Lock()
				defer logMu.Unlock()
				t.Fatalf("timed out waiting for %s; log:\n%s", what, logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A change: the rule now matches umount2 instead.
	bumpWrite(t, p, strings.NewReplacer(`"mount"`, `"umount2"`, "{name: mount,", "{name: umount2,").Replace(goodRule))
	waitFor("the new rule", func() bool { return eng.Set().Rule("r1").Syscalls[0] == "umount2" })
	good := eng.Set()
	// A broken file: the previous set stays, the error is logged and reported.
	bumpWrite(t, p, strings.Replace(goodRule, `syscall.name == "mount"`, `syscall.nme == "mount"`, 1))
	waitFor("the reload error", func() bool { return eng.ReloadError() != nil })
	if eng.Set() != good {
		t.Error("a broken file replaced the active set")
	}
	if !strings.Contains(eng.ReloadError().Error(), "undefined field 'nme'") {
		t.Errorf("reload error: %v", eng.ReloadError())
	}
	logMu.Lock()
	if !strings.Contains(logs.String(), "rules reload failed") {
		t.Errorf("log: %s", logs.String())
	}
	logMu.Unlock()
	if got := testutil.ToFloat64(eng.m.reloads.WithLabelValues("error")); got < 1 {
		t.Errorf("berm_rules_reloads_total{result=error} = %v", got)
	}
	// Fixed again: picked up, error cleared.
	bumpWrite(t, p, goodRule)
	waitFor("the fixed rule", func() bool { return eng.ReloadError() == nil && eng.Set() != good })
	cancel()
	<-done
}

// bumpWrite writes a file and moves its mtime forward, so that the change is seen even
// within the filesystem's timestamp granularity.
// bumpWrite replaces p's content atomically (as editors and config management do, by
// renaming a new file over it), with a newer mtime: the watcher polls, and a write in place
// could be read half done.
func bumpWrite(t *testing.T, p, data string) {
	t.Helper()
	st, _ := os.Stat(p)
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	next := time.Now()
	if st != nil && !next.After(st.ModTime()) {
		next = st.ModTime().Add(time.Second)
	}
	if err := os.Chtimes(tmp, next, next); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The index keeps rules off events they cannot match.
func TestIndex(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	b := set.candidates(&event.Event{Kind: event.KindSyscall, Syscall: &event.Syscall{Name: "bpf"}})
	var ids []string
	for _, r := range b.rules {
		ids = append(ids, r.ID)
	}
	// kernel-bpf, plus the rules that read syscall events without naming the syscall.
	if !strings.Contains(strings.Join(ids, ","), "kernel-bpf") || strings.Contains(strings.Join(ids, ","), "escape-mount") {
		t.Errorf("rules for a bpf syscall: %v", ids)
	}
	for _, r := range b.rules {
		if r.Syscalls != nil && !contains(r.Syscalls, "bpf") {
			t.Errorf("rule %s (syscalls %v) indexed under bpf", r.ID, r.Syscalls)
		}
	}
	if b := set.candidates(&event.Event{Kind: event.KindExit, Exit: &event.Exit{}}); b != nil && len(b.rules) > 0 {
		t.Errorf("rules on exit events: %d", len(b.rules))
	}
}

// A kind test in one branch of an OR keeps the other branch's syscall names as the rule's
// index: exec-from-writable-dir is evaluated on execve/execveat only, not on every syscall.
func TestIndexKindBranch(t *testing.T) {
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("exec-from-writable-dir")
	if r == nil {
		t.Fatal("rule not shipped")
	}
	got := append([]string(nil), r.Syscalls...)
	sort.Strings(got)
	if strings.Join(got, ",") != "execve,execveat" {
		t.Fatalf("syscall index %v, want [execve execveat]", r.Syscalls)
	}
}
