package csan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// stageCfg is the stage's configuration (sandboxer/sandboxinit/stageconfig.go is its
// definition; this is a second encoder of it, for bytes the init would never write).
type stageCfg struct {
	flags     uint32
	dir       string
	argv, env []string
	landlock  *stageLandlock
	progs     [3][]uint64 // tool, setid, approvals: sock_filter as 8 little-endian bytes
}

type stageLandlock struct {
	fs, net, scoped uint64
	paths           []string
	ports           []uint32
}

const (
	stageMagic     = 0x31545342
	flagLandlock   = 8
	retAllow       = 0x7fff0000_0000_0006 // BPF_RET|BPF_K, k = SECCOMP_RET_ALLOW
	stageMaxConfig = 64 << 20
)

// encode returns the body (without its length) and the offsets of every length or count in
// it, the fields a hostile configuration makes overflow.
func (c stageCfg) encode() (body []byte, lengths []int) {
	le := binary.LittleEndian
	u32 := func(v uint32) { body = le.AppendUint32(body, v) }
	n32 := func(v int) { lengths = append(lengths, len(body)); u32(uint32(v)) }
	u64 := func(v uint64) { body = le.AppendUint64(body, v) }
	str := func(s string) { n32(len(s)); body = append(body, s...) }
	strs := func(l []string) {
		n32(len(l))
		for _, s := range l {
			str(s)
		}
	}
	flags := c.flags
	if c.landlock != nil {
		flags |= flagLandlock
	}
	u32(stageMagic)
	u32(flags)
	str(c.dir)
	strs(c.argv)
	strs(c.env)
	if ll := c.landlock; ll != nil {
		u64(ll.fs)
		u64(ll.net)
		u64(ll.scoped)
		n32(len(ll.paths))
		for _, p := range ll.paths {
			u64(1)
			str(p)
		}
		n32(len(ll.ports))
		for _, p := range ll.ports {
			u64(1)
			u32(p)
		}
	}
	for _, p := range c.progs {
		n32(len(p))
		for _, f := range p {
			u64(f)
		}
	}
	return body, lengths
}

// frame is a body as it travels: its u32 length, then the body.
func frame(body []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// stageRun is one run of the sanitized stage: what it printed, how it ended, what it wrote on
// its failure pipe (fd 4).
type stageRun struct {
	result
	report []byte
}

// runStage starts the stage (--dump or for real), sends msg on its channel with nfds
// descriptors attached (the tool's stdin: one), then the start byte when sendStart is set, and
// closes the channel.
func runStage(t *testing.T, stage string, dump bool, msg []byte, nfds int, sendStart bool, env []string) stageRun {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "ours"), os.NewFile(uintptr(pair[1]), "theirs")
	defer ours.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	argv := []string{"berm-stage"}
	if dump {
		argv = append(argv, "--dump")
	}
	_, wait := start(t, stage, argv, env, theirs, pw)
	theirs.Close()
	pw.Close()
	report := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(pr); report <- b }()
	if len(msg) > 0 {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		var fds []int
		for range nfds {
			fds = append(fds, int(devnull.Fd()))
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		n, err := unix.SendmsgN(pair[0], msg, oob, nil, unix.MSG_NOSIGNAL)
		for err == nil && n < len(msg) {
			var w int
			w, err = unix.SendmsgN(pair[0], msg[n:], nil, nil, unix.MSG_NOSIGNAL)
			n += w
		}
		devnull.Close()
		// err: the stage stopped reading (it refused the configuration): it says why below
	}
	if sendStart {
		_, _ = ours.Write([]byte{'S'})
	}
	_ = unix.Shutdown(pair[0], unix.SHUT_WR)
	r := wait()
	return stageRun{result: r, report: <-report}
}

// checkStage is the stage's contract on any input: no sanitizer report, and an exit that is
// the tool's (0, here) or a failure it reports as one JSON object on fd 4 carrying its code.
func checkStage(t *testing.T, what string, r stageRun, dump bool) {
	t.Helper()
	checkClean(t, what, r.result)
	rep := r.report
	if !dump {
		if len(rep) == 0 || rep[0] != 'u' {
			t.Fatalf("%s: the stage did not say it was up first: %q", what, rep)
		}
		rep = rep[1:]
	}
	if r.status == 0 && len(rep) == 0 {
		return
	}
	var f struct {
		Code  int    `json:"code"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rep, &f); err != nil {
		t.Fatalf("%s: status %d, its report %q is not JSON: %v", what, r.status, rep, err)
	}
	if f.Code != r.status || f.Code < 125 || f.Error == "" {
		t.Fatalf("%s: status %d, report %+v", what, r.status, f)
	}
}

func sampleCfg(dir string) stageCfg {
	return stageCfg{
		dir:  dir,
		argv: []string{"/bin/true", "", "\xff\xfe", "a b"},
		env:  []string{"PATH=/usr/bin:/bin", "NOEQUALS", "", "=", "\xc0\x80=\x1b[2J"},
		landlock: &stageLandlock{fs: 1, net: 0, scoped: 0,
			paths: []string{"/nonexistent-berm-csan", "/"}, ports: []uint32{443}},
		progs: [3][]uint64{{retAllow}, {retAllow}, nil},
	}
}

// The stage's own reader (--dump) reads the sample back to its end: the encoder above is the
// stage's format, and the rest of the tests mutate real configurations.
func TestStageReadsTheSampleConfiguration(t *testing.T) {
	stage := filepath.Join(sanitized(t), "berm-stage")
	body, _ := sampleCfg("/tmp").encode()
	r := runStage(t, stage, true, frame(body), 1, false, sanEnv)
	checkStage(t, "dump", r, true)
	if r.status != 0 || !bytes.HasSuffix(r.stdout, []byte("end 1\n")) || !bytes.Contains(r.stdout, []byte("arg \xff\xfe\n")) {
		t.Fatalf("status %d, dump:\n%s\nstderr %s", r.status, r.stdout, tail(r.stderr))
	}
}

// Cut at every offset (the length saying what was sent, or saying the whole while the
// channel ends early), every length and count overflowing, random bodies, and descriptors
// missing or too many: the stage refuses each with code 125 and a JSON reason, no report.
func TestStageRefusesMalformedConfigurations(t *testing.T) {
	stage := filepath.Join(sanitized(t), "berm-stage")
	full, lengths := sampleCfg(t.TempDir()).encode()
	type input struct {
		name string
		msg  []byte
		nfds int
	}
	var in []input
	for i := 0; i < len(full); i++ {
		in = append(in, input{fmt.Sprintf("body cut at %d", i), frame(full[:i]), 1})
		in = append(in, input{fmt.Sprintf("channel cut at %d", i), frame(full)[:4+i], 1})
	}
	le := binary.LittleEndian
	for _, off := range lengths {
		for _, v := range []uint32{0xffffffff, 0xfffffffc, 0x80000000, 0x7fffffff, 0x10000, uint32(len(full) - off), uint32(len(full)-off) - 3} {
			b := bytes.Clone(full)
			le.PutUint32(b[off:], v)
			in = append(in, input{fmt.Sprintf("length at %d is %#x", off, v), frame(b), 1})
		}
	}
	rng := rand.New(rand.NewPCG(23, 9))
	for i := range 64 {
		b := make([]byte, rng.IntN(256))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%2 == 0 && len(b) >= 8 {
			le.PutUint32(b, stageMagic) // past the magic, into the fields
			le.PutUint32(b[4:], uint32(rng.IntN(16)))
		}
		in = append(in, input{fmt.Sprintf("random body %d", i), frame(b), 1})
	}
	in = append(in,
		input{"a frame longer than the stage reads", le.AppendUint32(nil, stageMaxConfig+1), 1},
		input{"a frame of 4 GiB", le.AppendUint32(nil, 0xffffffff), 1},
		input{"no descriptor", frame(full), 0},
		input{"three descriptors", frame(full), 3},
		input{"two bytes", []byte{1, 0}, 1},
		input{"nothing", nil, 0},
	)
	for _, dump := range []bool{true, false} {
		for _, c := range in {
			what := fmt.Sprintf("%s (dump %v)", c.name, dump)
			r := runStage(t, stage, dump, c.msg, c.nfds, !dump, sanEnv)
			checkStage(t, what, r, dump)
			if r.status == 0 && c.nfds != 1 {
				t.Fatalf("%s: ran with %d descriptors", what, c.nfds)
			}
		}
	}
}

// A configuration as large as the stage takes: 100k arguments, a 1 MiB argument (the
// configuration has no execve bound), 10k environment entries with names without '=', a PATH
// of 1 MiB; read back whole by --dump, and for real it fails the exec (E2BIG) cleanly.
func TestStageTakesHugeConfigurations(t *testing.T) {
	stage := filepath.Join(sanitized(t), "berm-stage")
	argv := []string{"true", strings.Repeat("A", 1<<20)}
	for i := range 100_000 {
		argv = append(argv, hostileStrings[i%len(hostileStrings)][:min(8, len(hostileStrings[i%len(hostileStrings)]))])
	}
	env := append([]string{"PATH=" + strings.Repeat("/nonexistent:", 1<<16) + "/usr/bin:/bin:" + strings.Repeat("x", 1<<20)}, hostileEnv(10_000)...)
	c := stageCfg{dir: t.TempDir(), argv: argv, env: env, progs: [3][]uint64{{retAllow}, {retAllow}, nil}}
	body, _ := c.encode()
	r := runStage(t, stage, true, frame(body), 1, false, sanEnv)
	checkStage(t, "dump", r, true)
	if r.status != 0 || bytes.Count(r.stdout, []byte("\narg ")) != len(argv) || !bytes.HasSuffix(r.stdout, []byte("end 1\n")) {
		t.Fatalf("dump: status %d, %d args of %d, stderr %s", r.status, bytes.Count(r.stdout, []byte("\narg ")), len(argv), tail(r.stderr))
	}
	r = runStage(t, stage, false, frame(body), 1, true, sanEnv)
	checkStage(t, "run", r, false)
	if r.status != 126 || !bytes.Contains(r.report, []byte("argument list too long")) {
		t.Fatalf("run: status %d, report %.200q", r.status, r.report)
	}
	// and the stage's own argv and environment, huge and odd, change nothing
	many := append([]string{"berm-stage"}, strings.Split(strings.Repeat("x ", 100_000), " ")...)
	_, wait := start(t, stage, many, hostileEnv(10_000))
	checkClean(t, "berm-stage with 100k arguments and no channel", wait())
}

// The sample for real, without Landlock: the stage confines itself and executes the tool.
func TestStageRunsTheSampleTool(t *testing.T) {
	stage := filepath.Join(sanitized(t), "berm-stage")
	c := sampleCfg(t.TempDir())
	c.landlock = nil
	body, _ := c.encode()
	r := runStage(t, stage, false, frame(body), 1, true, sanEnv)
	checkStage(t, "run", r, false)
	if r.status != 0 {
		t.Fatalf("status %d, report %q, stderr %s", r.status, r.report, tail(r.stderr))
	}
}
