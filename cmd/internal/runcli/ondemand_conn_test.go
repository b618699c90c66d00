package runcli

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// fakeBermd answers run requests with a record of a call that exited 0, and counts the
// connections it accepted.
type fakeBermd struct {
	ln       *net.UnixListener
	mu       sync.Mutex
	accepted int
	calls    []callproto.Request
}

func startFakeBermd(t *testing.T, socket string) *fakeBermd {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBermd{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.accepted++
			f.mu.Unlock()
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeBermd) serve(c *net.UnixConn) {
	defer c.Close()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return // a probe
	}
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
	var req callproto.Request
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&req); err != nil {
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.mu.Unlock()
	rec := &event.CallRecord{CallStart: event.CallStart{CallID: req.CallID}, EndReason: event.EndExit}
	_ = json.NewEncoder(c).Encode(callproto.Reply{Record: rec})
}

// With --daemon auto, the connection that finds a running bermd carries the call: bermd is
// reached once per call, not probed first and connected to again.
func TestAutoCallsOverTheConnectionThatFoundBermd(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "bermd.sock")
	f := startFakeBermd(t, socket)
	o, err := Parse([]string{"--socket", socket, "--daemon", "auto", "--workspace", dir, "--", "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.ViaDaemon() {
		t.Fatal("a running bermd was not found")
	}
	if st := o.Remote(); st != 0 {
		t.Fatalf("berm run exited %d", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.accepted != 1 || len(f.calls) != 1 || f.calls[0].CallID != o.Request.CallID {
		t.Fatalf("bermd accepted %d connections and ran %d calls (%+v), want 1 and the call", f.accepted, len(f.calls), f.calls)
	}
}

// A connection runs one call; a second Run on it is refused, not sent on a closed descriptor
// (which another file may have taken by then).
func TestConnRunsOneCall(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "bermd.sock")
	startFakeBermd(t, socket)
	c, err := callproto.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	stdio := [3]*os.File{null, null, null}
	req := &callproto.Request{CallID: "one", Argv: []string{"/bin/true"}}
	if rep, err := c.Run(req, stdio, nil); err != nil || rep.Record == nil {
		t.Fatalf("first call: %v %v", rep, err)
	}
	if _, err := c.Run(req, stdio, nil); err == nil {
		t.Fatal("a second call ran on a used connection")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close after use: %v", err)
	}
}
