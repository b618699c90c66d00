package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// StageBinary is the tool's stage (cmd/berm-stage), installed beside the init's binary.
const StageBinary = "berm-stage"

// The stage's configuration, as berm-stage reads it (cmd/berm-stage/main.c keeps copies of
// these constants; TestStageConstants compares them). Little-endian, strings and lists
// length-prefixed (u32):
//
//	u32 magic, u32 flags, str dir, strs argv, strs env,
//	[flags&stageLandlock: u64 handledFS, u64 handledNet, u64 scoped,
//	 u32 n, n × (u64 access, str path), u32 n, n × (u64 access, u32 port)],
//	prog tool, prog setid, prog approvals (u32 n, n × 8-byte sock_filter; n may be 0)
//
// It travels on the stage's channel as u32 length and body, the tool's stdin attached to its
// first bytes (SCM_RIGHTS); then one byte, stageStart, once the call's root is complete.
const (
	stageMagic      = 0x31545342 // "BST1"
	stageTerminal   = 1
	stageTermStdout = 2
	stageTermStderr = 4
	stageLandlock   = 8
	stageMaxConfig  = 64 << 20
	stageStart      = 'S'
	stageListener   = 'L'
)

// encodeStage is tc in the stage's format, with the setid program (always installed).
func encodeStage(tc toolConfig, setid []unix.SockFilter) ([]byte, error) {
	if len(tc.Argv) == 0 {
		return nil, errors.New("no argv")
	}
	b := make([]byte, 4, 4096)
	u32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	var bad error
	str := func(s string) {
		for i := 0; i < len(s); i++ {
			if s[i] == 0 && bad == nil {
				bad = fmt.Errorf("%q holds a NUL byte", s)
			}
		}
		u32(uint32(len(s)))
		b = append(b, s...)
	}
	strs := func(v []string) {
		u32(uint32(len(v)))
		for _, s := range v {
			str(s)
		}
	}
	prog := func(p []unix.SockFilter) {
		u32(uint32(len(p)))
		for _, f := range p {
			b = binary.LittleEndian.AppendUint16(b, f.Code)
			b = append(b, f.Jt, f.Jf)
			u32(f.K)
		}
	}
	var flags uint32
	if t := tc.Terminal; t != nil {
		flags |= stageTerminal
		if t.Stdout {
			flags |= stageTermStdout
		}
		if t.Stderr {
			flags |= stageTermStderr
		}
	}
	if tc.Landlock != nil {
		flags |= stageLandlock
	}
	u32(stageMagic)
	u32(flags)
	str(tc.Dir)
	strs(tc.Argv)
	strs(tc.Env)
	if ll := tc.Landlock; ll != nil {
		u64(ll.HandledFS)
		u64(ll.HandledNet)
		u64(ll.Scoped)
		u32(uint32(len(ll.Paths)))
		for _, p := range ll.Paths {
			u64(p.Access)
			str(p.Path)
		}
		u32(uint32(len(ll.Ports)))
		for _, p := range ll.Ports {
			u64(p.Access)
			u32(uint32(p.Port))
		}
	}
	for _, p := range [][]unix.SockFilter{tc.Seccomp, setid, tc.Approvals} {
		if len(p) > math.MaxUint16 {
			return nil, fmt.Errorf("a seccomp program of %d instructions", len(p))
		}
		prog(p)
	}
	if bad != nil {
		return nil, bad
	}
	if len(b)-4 > stageMaxConfig {
		return nil, fmt.Errorf("%d bytes, more than the stage reads (%d)", len(b)-4, stageMaxConfig)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b, nil
}

// sendStage writes an encoded configuration on the stage's channel, stdin attached.
func sendStage(ch *os.File, msg []byte, stdin int) error {
	fd := int(ch.Fd())
	n, err := unix.SendmsgN(fd, msg, unix.UnixRights(stdin), nil, unix.MSG_NOSIGNAL)
	for err == nil && n < len(msg) {
		var w int
		w, err = unix.SendmsgN(fd, msg[n:], nil, nil, unix.MSG_NOSIGNAL)
		n += w
	}
	return err
}

// recvListener reads the approval listener the stage sends back: nil, nil when the channel
// closed without it (the stage failed first).
func recvListener(ch *os.File) (*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(int(ch.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return nil, err
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if more, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, more...)
			}
		}
	}
	if buf[0] != stageListener || len(fds) != 1 {
		for _, f := range fds {
			unix.Close(f)
		}
		return nil, fmt.Errorf("the tool's stage sent %q with %d files, not the approval listener", buf[:n], len(fds))
	}
	return os.NewFile(uintptr(fds[0]), "approval listener"), nil
}
