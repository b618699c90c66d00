package callproto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// The bare invocation: the berm front written in C (cmd/berm/main.c) sends what it has and
// nothing it would have to work out, so that the flags, their defaults and the call's
// resolution have one definition (cmd/internal/runcli), which bermd runs for it.
//
// On the wire: one byte 'A' carrying stdin, stdout, stderr and the caller's working
// directory (an O_PATH descriptor) as SCM_RIGHTS; then a little-endian uint32 length and that
// many bytes: a uint32 count and as many NUL-terminated arguments (berm run's, after "run"),
// a uint32 count and as many NUL-terminated environment entries. While the call runs the
// front may send Interrupt lines, as in the JSON form. bermd answers with frames: a kind
// byte, then for FrameStderr a uint32 length and bytes; for FrameEnd the exit status (int32)
// and three length-prefixed byte strings (what to print on stderr, the --summary path, the
// summary's bytes); FrameFallback has no body.

// InvokeMagic is the first byte of a bare invocation.
const InvokeMagic = 'A'

// MaxInvocation bounds an invocation's bytes: more than any argv and environment execve
// accepts (ARG_MAX is a quarter of the stack limit, capped at 6 MiB of strings per kernel),
// little enough that a caller cannot make bermd hold much.
const MaxInvocation = 16 << 20

// Frame kinds bermd sends a bare invocation's front.
const (
	// FrameStderr: bytes for the caller's stderr, now (before the call's own output).
	FrameStderr = 'e'
	// FrameFallback: bermd does not run this invocation: the front executes berm's Go front
	// with the same arguments (an embedded run, another bermd's socket). Nothing ran.
	FrameFallback = 'x'
	// FrameEnd: the call has ended (or never started); the last frame.
	FrameEnd = 'f'
)

// Invocation is berm run as the front saw it.
type Invocation struct {
	Args []string // after "run"
	Env  []string
	Cwd  *os.File // the caller's working directory (O_PATH)
	// NonRoot: the caller is not root; --tenant's default is then DefaultTenant (bermd's
	// choice: the only tenant the caller may run in, or none).
	NonRoot       bool
	DefaultTenant string
}

// LookupEnv is os.LookupEnv in the caller's environment (the last entry of a name wins, as
// the Go runtime reads its own).
func (inv *Invocation) LookupEnv(name string) (string, bool) {
	for i := len(inv.Env) - 1; i >= 0; i-- {
		e := inv.Env[i]
		if len(e) > len(name) && e[len(name)] == '=' && e[:len(name)] == name {
			return e[len(name)+1:], true
		}
	}
	return "", false
}

// FrontEnd is how berm run ends for the caller: its status, what it prints, the --summary
// file the front writes itself (in its own context: bermd writes no file for the caller).
type FrontEnd struct {
	Status      int
	Stderr      []byte
	SummaryPath string
	Summary     []byte
}

// ReadInvocation reads an invocation's arguments and environment (after its magic byte).
func ReadInvocation(r *bufio.Reader) (args, env []string, err error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, nil, fmt.Errorf("read invocation: %w", err)
	}
	if n > MaxInvocation {
		return nil, nil, fmt.Errorf("invocation of %d bytes: more than %d", n, MaxInvocation)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, nil, fmt.Errorf("read invocation: %w", err)
	}
	if args, b, err = strs(b); err != nil {
		return nil, nil, fmt.Errorf("invocation arguments: %w", err)
	}
	if env, b, err = strs(b); err != nil {
		return nil, nil, fmt.Errorf("invocation environment: %w", err)
	}
	if len(b) != 0 {
		return nil, nil, errors.New("invocation: trailing bytes")
	}
	return args, env, nil
}

// strs reads a count and as many NUL-terminated strings.
func strs(b []byte) ([]string, []byte, error) {
	if len(b) < 4 {
		return nil, nil, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) { // each string is at least its NUL
		return nil, nil, fmt.Errorf("%d strings in %d bytes", n, len(b))
	}
	out := make([]string, 0, n)
	for range n {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i == len(b) {
			return nil, nil, errors.New("string without its NUL")
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
	return out, b, nil
}

// AppendInvocation encodes an invocation's arguments and environment as ReadInvocation
// reads them (the C front writes the same bytes; Go tests use this).
func AppendInvocation(dst []byte, args, env []string) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for _, l := range [][]string{args, env} {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(l)))
		for _, s := range l {
			dst = append(append(dst, s...), 0)
		}
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// WriteStderrFrame sends bytes for the caller's stderr.
func WriteStderrFrame(w io.Writer, b []byte) error {
	_, err := w.Write(appendBytes([]byte{FrameStderr}, b))
	return err
}

// WriteFallbackFrame tells the front to run berm's Go front instead.
func WriteFallbackFrame(w io.Writer) error {
	_, err := w.Write([]byte{FrameFallback})
	return err
}

// WriteEndFrame ends a bare invocation.
func WriteEndFrame(w io.Writer, e FrontEnd) error {
	b := binary.LittleEndian.AppendUint32([]byte{FrameEnd}, uint32(int32(e.Status)))
	b = appendBytes(b, e.Stderr)
	b = appendBytes(b, []byte(e.SummaryPath))
	b = appendBytes(b, e.Summary)
	_, err := w.Write(b)
	return err
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(dst, uint32(len(b))), b...)
}

// FrontCall is a bare invocation as bermd read it (with berm run's parser): a request to
// launch, or an end or a fallback with nothing launched.
type FrontCall struct {
	// Request is the call to launch; nil: nothing is launched (End or Fallback).
	Request *Request
	// Early is for the caller's stderr before the call runs (warnings about its flags).
	Early    []byte
	Fallback bool
	End      FrontEnd
	// Finish is how berm run ends once the launched call has its reply.
	Finish func(Reply) FrontEnd
	// Cleanup runs after the call's end (the workspace made for it).
	Cleanup func()
	// FreshWorkspace: the workspace is one made for this call (no --workspace).
	FreshWorkspace bool
}
