// Package ptyrelay gives a tool call its own terminal when berm's caller has one, as `docker
// run -t` and script(1) do: berm allocates a pty, the launcher hands its slave to the tool as
// stdin, stdout, stderr and controlling terminal (in the tool's own session) and reads the
// tool's output from the master; this package, in the process that holds the caller's
// terminal, puts that terminal in raw mode, relays what the user types to the master, follows
// the window size, and restores the caller's settings when the call ends.
//
// The caller's terminal never reaches the sandbox: a tool that injects input (TIOCSTI) or
// turns off echo, canonical mode or signals does so on its own pty, and Ctrl-C typed by the
// user reaches the tool as SIGINT through the pty's line discipline.
//
// It links only x/sys/unix: the berm front that uses it starts once per call.
package ptyrelay

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Relay is one call's pty, relayed to the caller's terminal.
type Relay struct {
	// Master is the pty's master: the launcher gets the tool's end from it (TIOCGPTPEER) and
	// reads the tool's output from it. It stays open until Close.
	Master *os.File

	caller int // the caller's terminal (berm's stdin)
	saved  *unix.Termios
	wakeR  *os.File // readable once the relay must stop reading the caller's terminal
	wakeW  *os.File
	sigs   chan os.Signal

	mu       sync.Mutex
	restored bool
	// asking, while set, takes what the user types instead of the tool (Prompt).
	asking chan []byte
	pmu    sync.Mutex // one question at a time
	raw    unix.Termios
	done   chan struct{}
	stop   sync.Once

	// While a question is open, the tool's output to the caller's terminal (the writers Hold
	// made) is held here, in order, and written after the answer: nothing the tool draws can
	// come after the question or over it.
	hmu     sync.Mutex
	hcond   *sync.Cond
	holding bool
	held    []heldChunk
	heldN   int
}

type heldChunk struct {
	w io.Writer
	b []byte
}

// MaxHeld bounds the tool's output held while a question is open. At the bound the tool's
// writes wait for the answer (the copier stops reading its pipe or pty, whose buffer fills,
// and the tool blocks in write): nothing is dropped, and the question stays the last thing on
// the screen. The wait is bounded by the request's own timeout.
const MaxHeld = 1 << 20

// IsTerminal says whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Start allocates a pty for the call when caller (berm's stdin) is a terminal, and starts
// relaying; it returns nil, nil when it is not (pipes pass through as they are).
func Start(caller *os.File) (_ *Relay, err error) {
	fd := int(caller.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, nil
	}
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("allocate a pty for the call: %w", err)
	}
	r := &Relay{Master: os.NewFile(uintptr(m), "pty-master"), caller: fd, saved: saved, done: make(chan struct{})}
	r.hcond = sync.NewCond(&r.hmu)
	defer func() {
		if err != nil {
			r.Master.Close()
		}
	}()
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return nil, fmt.Errorf("unlock the call's pty: %w", err)
	}
	r.resize()
	if r.wakeR, r.wakeW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("pty relay: %w", err)
	}
	// The user's keys go to the tool's line discipline, unprocessed by the caller's.
	r.raw = *saved
	makeRaw(&r.raw)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &r.raw); err != nil {
		r.wakeR.Close()
		r.wakeW.Close()
		return nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	// SIGINT and SIGTERM end the call (berm's own handlers see them too); the caller's
	// settings come back at once, whatever happens to this process next.
	r.sigs = make(chan os.Signal, 4)
	signal.Notify(r.sigs, syscall.SIGWINCH, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCONT)
	go r.signals()
	go r.input()
	return r, nil
}

// makeRaw is cfmakeraw(3).
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}

// resize gives the pty the caller's window size; the kernel tells the tool (SIGWINCH).
func (r *Relay) resize() {
	if ws, err := unix.IoctlGetWinsize(r.caller, unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(r.Master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

func (r *Relay) signals() {
	for {
		select {
		case <-r.done:
			return
		case s := <-r.sigs:
			switch s {
			case syscall.SIGWINCH:
				r.resize()
			case syscall.SIGCONT:
				// Stopped and continued (SIGSTOP, then fg): the shell had the terminal in
				// between, in its own mode.
				r.reraw()
				r.resize()
			default:
				_ = r.restore()
			}
		}
	}
}

// input copies what the user types to the pty until Close. It reads the caller's terminal
// only when poll says there is something to read, so that nothing typed after the call is
// taken from the caller's shell by a read left pending.
func (r *Relay) input() {
	buf := make([]byte, 4096)
	fds := []unix.PollFd{{Fd: int32(r.wakeR.Fd()), Events: unix.POLLIN}, {Fd: int32(r.caller), Events: unix.POLLIN}}
	master := int(r.Master.Fd())
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[0].Revents != 0 {
			return
		}
		if fds[1].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
			continue
		}
		n, err := unix.Read(r.caller, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			return
		}
		r.mu.Lock()
		ask := r.asking
		r.mu.Unlock()
		if ask != nil {
			select {
			case ask <- append([]byte(nil), buf[:n]...):
			default: // typed faster than read: a question needs a few keys only
			}
			continue
		}
		for off := 0; off < n; {
			w, err := unix.Write(master, buf[off:n])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				// The tool's end is gone: the call is ending.
				return
			}
			off += w
		}
	}
}

// reraw puts the caller's terminal in raw mode again, unless it has been restored for good.
func (r *Relay) reraw() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.restored {
		_ = unix.IoctlSetTermios(r.caller, unix.TCSETS, &r.raw)
	}
}

// restore puts the caller's terminal back as it was, once.
func (r *Relay) restore() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restored {
		return nil
	}
	r.restored = true
	if err := unix.IoctlSetTermios(r.caller, unix.TCSETS, r.saved); err != nil {
		return fmt.Errorf("restore the terminal's settings: %w", err)
	}
	return nil
}

// Close stops relaying and restores the caller's terminal settings. It may be called more
// than once: as soon as the call has ended, so that berm's own messages print on a terminal
// in its usual mode, and deferred, for every other way out.
func (r *Relay) Close() error {
	r.stop.Do(func() {
		signal.Stop(r.sigs)
		close(r.done)
		_, _ = r.wakeW.Write([]byte{0})
	})
	// The input goroutine may be in a write to the master (a tool that reads nothing): it is
	// not waited for; it stops reading the caller's terminal once woken, and the pipe and the
	// master go with the process.
	return r.restore()
}

// Prompt asks the user a question at the caller's terminal, as sudo asks for a password:
// while it waits, what the user types answers it and does not reach the tool. It returns the
// line typed (Enter ends it, Ctrl-C answers with an empty line), or false when abandon closed
// first (the question was answered elsewhere) or the relay stopped. Questions are put one at
// a time.
func (r *Relay) Prompt(question string, abandon <-chan struct{}) (string, bool) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	select {
	case <-abandon:
		return "", false
	default:
	}
	keys := make(chan []byte, 16)
	r.mu.Lock()
	if r.restored {
		r.mu.Unlock()
		return "", false
	}
	r.asking = keys
	r.mu.Unlock()
	// From here the tool's output waits (a write under way finishes first): the question is
	// the last thing on the screen until it is answered.
	r.hmu.Lock()
	r.holding = true
	r.hmu.Unlock()
	defer r.release()
	defer func() {
		r.mu.Lock()
		r.asking = nil
		r.mu.Unlock()
	}()
	say := func(s string) { writeAll(r.caller, []byte(s)) }
	// Keys typed before the question was on the screen answered something else (perhaps a
	// question the tool drew): dropped, as sudo drops them before it asks.
	_ = unix.IoctlSetInt(r.caller, unix.TCFLSH, unix.TCIFLUSH)
	say(ResetTerminal + question)
	var line []byte
	for {
		select {
		case <-abandon:
			say(" (answered elsewhere)\r\n")
			return "", false
		case <-r.done:
			return "", false
		case b := <-keys:
			for _, c := range b {
				switch {
				case c == '\r' || c == '\n':
					say("\r\n")
					return string(line), true
				case c == 3: // Ctrl-C
					say("^C\r\n")
					return "", true
				case c == 0x7f || c == 0x08:
					if len(line) > 0 {
						line = line[:len(line)-1]
						say("\b \b")
					}
				case c >= 0x20 && c < 0x7f && len(line) < 256:
					line = append(line, c)
					say(string(c))
				}
			}
		}
	}
}

// ResetTerminal is written before a question: whatever state the tool's output left the
// terminal in, the question shows as written, on the last line of the screen. CAN and ST end
// an escape sequence or a string (a window title, a DCS) left open, which would swallow the
// question; then the text attributes (invisible, reverse, colours), the palette and default
// colours (a foreground made the background's), insert mode, origin mode and the scroll
// region are reset, the cursor is shown, the character set is ASCII again, and the cursor
// goes to the screen's last line, below everything drawn, which is cleared.
const ResetTerminal = "\x18\x1b\\" + "\x1b[0m\x1b[4l\x1b[?25h\x1b[?6l\x1b[r\x1b(B\x0f" +
	"\x1b]104\x07\x1b]110\x07\x1b]111\x07" + "\x1b[999;1H\x1b[J"

// Hold is w (where the launcher copies the tool's output: berm's stdout or stderr, the
// caller's terminal) held while a question is open: what the tool writes meanwhile is kept,
// in order across every writer Hold made, and written once the question is answered; past
// MaxHeld the write waits for the answer.
func (r *Relay) Hold(w io.Writer) io.Writer { return &heldWriter{r: r, w: w} }

type heldWriter struct {
	r *Relay
	w io.Writer
}

func (h *heldWriter) Write(p []byte) (int, error) {
	r := h.r
	r.hmu.Lock()
	defer r.hmu.Unlock()
	for r.holding && r.heldN > 0 && r.heldN+len(p) > MaxHeld {
		r.hcond.Wait()
	}
	if r.holding {
		r.held = append(r.held, heldChunk{h.w, append([]byte(nil), p...)})
		r.heldN += len(p)
		return len(p), nil
	}
	// Written with the lock held: a question cannot start in the middle of a write.
	return h.w.Write(p)
}

// release writes what was held, in order, and lets the tool's output through again.
func (r *Relay) release() {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	for _, c := range r.held {
		_, _ = c.w.Write(c.b)
	}
	r.held, r.heldN, r.holding = nil, 0, false
	r.hcond.Broadcast()
}

func writeAll(fd int, b []byte) {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		b = b[n:]
	}
}
