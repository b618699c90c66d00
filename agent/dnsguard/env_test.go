package dnsguard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/netguard"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/tracer"
	"github.com/bermsec/berm/bpf"
	"github.com/bermsec/berm/sandboxer/cgroup"
	"github.com/bermsec/berm/testenv/testutil"
)

// node is one agent's kernel side as the daemon sets it up: a real tracer, the network
// programs attached once to a root cgroup, and the resolver, asking the test's upstream.
type node struct {
	tr   *tracer.Tracer
	g    *netguard.Guard
	r    *Resolver
	root string
	slot uint32

	mu      sync.Mutex
	denials map[uint64][]bpf.WireBermNetDeny // by cgroup id
}

func newNode(t testing.TB, cfg Config) *node {
	t.Helper()
	testutil.RequireRoot(t, "attaching cgroup sock programs and creating cgroups (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)")
	layout, err := cgroup.Detect()
	if err != nil || layout.V2 == "" {
		testutil.Unavailable(t, "no cgroup2 mount (cgroup v2 ids key the per-call maps): %v", err)
	}
	n := &node{denials: map[uint64][]bpf.WireBermNetDeny{}, slot: 3}
	if n.tr, err = tracer.New(tracer.DefaultConfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.tr.Close() })
	if n.g, err = netguard.New(n.tr.Shared()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.g.Close() })
	n.root = filepath.Join(layout.V2, fmt.Sprintf("berm-dnstest-%08x", rand.Uint32()))
	if err := os.Mkdir(n.root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(n.root); err != nil {
			t.Errorf("remove test root cgroup: %v", err)
		}
	})
	if err := n.g.AttachRoot(n.root); err != nil {
		t.Fatal(err)
	}
	if n.r, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.r.Close() })
	rd, err := ringbuf.NewReader(n.tr.Events())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { rd.Close(); <-done })
	go func() { defer close(done); n.read(rd) }()
	return n
}

func (n *node) read(rd *ringbuf.Reader) {
	hdrSize := binary.Size(bpf.WireBermHdr{})
	for {
		rd.SetDeadline(time.Now().Add(20 * time.Millisecond))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return
		}
		if len(rec.RawSample) < hdrSize {
			continue
		}
		var h bpf.WireBermHdr
		binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &h)
		if bpf.WireBermOp(h.Op) != bpf.WireBermOpBERM_OP_NET_DENY {
			continue
		}
		var d bpf.WireBermNetDeny
		if binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &d) == nil {
			n.mu.Lock()
			n.denials[h.CgroupId] = append(n.denials[h.CgroupId], d)
			n.mu.Unlock()
		}
	}
}

// call is one sandboxed call on the node: its cgroup, registered and attached, its resolver
// listeners, and the dns events the resolver recorded for it.
type call struct {
	n   *node
	id  uint64
	fd  int
	cn  *netguard.CallNet
	dns *Call
	pol *policy.Compiled

	mu     sync.Mutex
	events []event.DNS
}

func compile(t testing.TB, yaml string) *policy.Compiled {
	t.Helper()
	p, err := policy.Parse("p.yaml", []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: t}\n"+yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Compile(policy.CompileEnv{Workspace: t.TempDir(), Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (n *node) newCall(t testing.TB, pol *policy.Compiled) *call {
	t.Helper()
	c := &call{n: n, pol: pol}
	dir := filepath.Join(n.root, fmt.Sprintf("call-%08x", rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove call cgroup: %v", err)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	c.id = st.Ino
	var err error
	if c.fd, err = unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	audit := pol.Mode == policy.Audit
	if err := n.tr.Register(c.id, tracer.CallConfig{Slot: n.slot, Audit: audit}); err != nil {
		t.Fatal(err)
	}
	n.slot++
	t.Cleanup(func() { n.tr.Unregister(c.id) })
	if c.cn, err = n.g.Attach(dir, c.id, &pol.Network, audit); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.cn.Close() })
	c.dns, err = n.r.Attach(CallConfig{Name: dir, Policy: &pol.Network, Audit: audit, Pins: c.cn, Emit: func(ev event.Event) {
		c.mu.Lock()
		c.events = append(c.events, *ev.DNS)
		c.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.dns.Close() })
	if err := c.cn.SetResolver(c.dns.Port()); err != nil {
		t.Fatal(err)
	}
	return c
}

// run runs the actions in the call's cgroup and returns name -> result.
func (c *call) run(t testing.TB, actions ...string) map[string]string {
	t.Helper()
	cmd := testutil.Command(t, childName, strings.Join(actions, "\n"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: c.fd}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	res := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, r, ok := strings.Cut(sc.Text(), " "); ok {
			res[name] = r
		}
	}
	return res
}

// expect runs the actions ("name kind args... => want") and checks each result.
func (c *call) expect(t *testing.T, lines ...string) {
	t.Helper()
	var actions, names, wants []string
	for _, l := range lines {
		act, want, _ := strings.Cut(l, " => ")
		actions = append(actions, act)
		names = append(names, strings.Fields(act)[0])
		wants = append(wants, want)
	}
	got := c.run(t, actions...)
	for i, name := range names {
		if got[name] != wants[i] {
			t.Errorf("%s: got %q, want %q", actions[i], got[name], wants[i])
		}
	}
}

func (c *call) dnsEvents() []event.DNS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event.DNS(nil), c.events...)
}

// denials are the kernel's denial events of the call once n have arrived (or after 5s).
func (c *call) denials(n int) []bpf.WireBermNetDeny {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.n.mu.Lock()
		got := append([]bpf.WireBermNetDeny(nil), c.n.denials[c.id]...)
		c.n.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// targets listens on TCP port p of each loopback address (the names' answers), and returns p.
func targets(t testing.TB, addrs ...string) int {
	t.Helper()
	port := 0
	for try := 0; try < 20; try++ {
		var ls []net.Listener
		ok := true
		for _, a := range addrs {
			l, err := net.Listen("tcp4", net.JoinHostPort(a, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			if port == 0 {
				port = l.Addr().(*net.TCPAddr).Port
			}
			ls = append(ls, l)
		}
		if ok {
			for _, l := range ls {
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
				t.Cleanup(func() { l.Close() })
			}
			return port
		}
		for _, l := range ls {
			l.Close()
		}
		port = 0
	}
	t.Fatal("no common free port on the target addresses")
	return 0
}

func (c *call) pins() *netguard.CallNet { return c.cn }
