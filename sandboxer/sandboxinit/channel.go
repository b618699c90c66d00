package sandboxinit

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The launcher talks to the init over a unix stream socket (fd 3) in frames: a 4-byte
// little-endian length, then a JSON Message. Files travel with a frame's first bytes. A warm
// init gets a Prepare frame when it starts and its call's frame when a call claims it; an init
// started for its call gets the call's frame only.

// Message is one frame.
type Message struct {
	// Prepare is what can be built before the call is known: the policy-granted part of the
	// root. The call's own Root must match it, or the init builds the root again.
	Prepare *RootPlan `json:"prepare,omitempty"`
	// PrepareNet: the init has a network namespace of its own (the call's NewNet), whose
	// loopback it brings up with the rest of Prepare.
	PrepareNet bool `json:"prepareNet,omitempty"`
	// Call is the call. Its frame carries the tool's stdin and the workspace's detached mount.
	Call *Config `json:"call,omitempty"`
	// Start lets a held init go on (Config.Hold).
	Start bool `json:"start,omitempty"`
	// Listener goes the other way, init to launcher (from the tool's stage): its file is the approval
	// filter's notification listener (sandboxinit.Config.Approvals), owned by the launcher's
	// supervisor and by nothing in the call.
	Listener bool `json:"listener,omitempty"`
	// Connect asks the init to connect the socket sent with the frame to Addr (a sockaddr as
	// the tool passed it, copied by the approval supervisor), from inside the call's cgroup:
	// the egress programs judge a connect by the cgroup of the task making it, and the
	// supervisor's own thread is in none of the call's. Connected is the answer.
	Connect   *ConnectRequest `json:"connect,omitempty"`
	Connected *ConnectResult  `json:"connected,omitempty"`
}

// ConnectRequest is one connect the supervisor performs for the tool.
type ConnectRequest struct {
	ID   uint64 `json:"id"`
	Addr []byte `json:"addr"`
}

// ConnectResult is its outcome: 0 or an errno.
type ConnectResult struct {
	ID    uint64 `json:"id"`
	Errno int    `json:"errno"`
}

// Reader reads frames and the files sent with them from a socket.
type Reader struct{ ch channel }

// NewReader reads frames from fd.
func NewReader(fd int) *Reader { return &Reader{channel{fd: fd}} }

// Next returns the next frame and its files.
func (r *Reader) Next() (*Message, []*os.File, error) { return r.ch.next() }

// ReadListener reads the frame carrying the approval filter's listener from fd (the
// launcher's end of the init's channel). It returns nil, nil when the init closed the channel
// without one: the tool did not start.
func ReadListener(r *Reader) (*os.File, error) {
	m, files, err := r.Next()
	if err != nil {
		return nil, nil
	}
	if !m.Listener || len(files) != 1 {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("expected the approval listener from the sandbox init, got %d files", len(files))
	}
	return files[0], nil
}

// maxFrame bounds a frame: a config is a few KiB to a few hundred (argv, Landlock rules).
const maxFrame = 64 << 20

// SendFrame writes m to the socket fd with files attached.
func SendFrame(fd int, m Message, files ...int) error {
	payload, err := json.Marshal(m)
	if err != nil {
		return err
	}
	frame := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(payload)), uint32(len(payload)))
	frame = append(frame, payload...)
	var rights []byte
	if len(files) > 0 {
		rights = unix.UnixRights(files...)
	}
	n, err := unix.SendmsgN(fd, frame, rights, nil, 0)
	for (err == nil || err == unix.EINTR) && n < len(frame) {
		var m int
		m, err = unix.Write(fd, frame[n:])
		if m > 0 {
			n += m
		}
	}
	return err
}

// channel reads frames and the files sent with them.
type channel struct {
	fd  int
	buf []byte
	off int64 // stream offset of buf[0]
	// arrivals are files by the stream offset where the read that brought them ended. A read
	// may return the tail of one frame and the head of the next; the kernel hands over a
	// message's files with the read that ends with (some of) that message's bytes, and the
	// launcher sends files with a frame's first bytes: so the files belong to the frame
	// holding the last byte of that read.
	arrivals []arrival
}

type arrival struct {
	end   int64
	files []*os.File
}

// next returns the next frame and the files sent with it.
func (c *channel) next() (*Message, []*os.File, error) {
	chunk := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		if len(c.buf) >= 4 {
			size := int(binary.LittleEndian.Uint32(c.buf))
			if size > maxFrame {
				return nil, nil, fmt.Errorf("frame of %d bytes from the launcher", size)
			}
			if len(c.buf) >= 4+size {
				var m Message
				if err := json.Unmarshal(c.buf[4:4+size], &m); err != nil {
					return nil, nil, fmt.Errorf("decode launcher frame: %w", err)
				}
				start, end := c.off, c.off+int64(4+size)
				c.buf = c.buf[4+size:]
				c.off = end
				var files []*os.File
				kept := c.arrivals[:0]
				for _, a := range c.arrivals {
					if a.end > start && a.end <= end {
						files = append(files, a.files...)
					} else {
						kept = append(kept, a)
					}
				}
				c.arrivals = kept
				return &m, files, nil
			}
		}
		n, oobn, _, _, err := unix.Recvmsg(c.fd, chunk, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, nil, err
			}
			a := arrival{end: c.off + int64(len(c.buf)+n)}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					return nil, nil, err
				}
				for _, f := range fds {
					a.files = append(a.files, os.NewFile(uintptr(f), "passed"))
				}
			}
			c.arrivals = append(c.arrivals, a)
		}
		if n == 0 {
			return nil, nil, errors.New("the channel closed before a whole frame")
		}
		c.buf = append(c.buf, chunk[:n]...)
	}
}
