package runcli_test

import (
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// terminalIoctls tries the ioctls that type into a terminal on the tool's own pty, its
// controlling terminal, where the kernel itself allows them (TIOCSTI with
// dev.tty.legacy_tiocsti=1; TIOCLINUX's "which console is in front", subcode 12): a refusal
// (EPERM) is the seccomp filter's. TIOCSTI is tried a second time with bits above 32 set,
// which the kernel drops from the request but a filter comparing 64 bits would not.
const terminalIoctls = `
import errno, fcntl, termios
TIOCLINUX, TIOCL_GETFGCONSOLE = 0x541C, 12
for name, req, arg in [("TIOCSTI", termios.TIOCSTI, b"x"),
                       ("TIOCSTI-HIGH-BITS", termios.TIOCSTI | (1 << 32), b"x"),
                       ("TIOCLINUX", TIOCLINUX, bytes([TIOCL_GETFGCONSOLE]))]:
    try:
        fcntl.ioctl(0, req, arg)
        print(name, "ALLOWED", flush=True)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno), flush=True)
`

// The strict policy's seccomp program refuses TIOCSTI and TIOCLINUX, even on the tool's own
// pty (where typing could only reach the tool itself): defence in depth for a tool that is
// handed another terminal. This needs the seccomp rule (spec.syscalls.denyTerminalInjection)
// from the seccomp work; it fails until that is merged.
func TestTerminalIoctlsRefusedBySeccomp(t *testing.T) {
	bermbin.RequireRoot(t)
	for _, m := range launchModes {
		t.Run(m.name, func(t *testing.T) {
			term := openCallerTerminal(t)
			args := append(append([]string{"run", "--workspace", bermbin.Workspace(t)}, m.args(t)...), "--", python, "-c", terminalIoctls)
			if status := term.run(t, true, args...); status != 0 {
				t.Fatalf("berm run: status %d; screen:\n%s", status, term.text())
			}
			screen := term.text()
			for _, want := range []string{"TIOCSTI EPERM", "TIOCSTI-HIGH-BITS EPERM", "TIOCLINUX EPERM"} {
				if !strings.Contains(screen, want) {
					t.Errorf("want %q; screen:\n%s", want, screen)
				}
			}
		})
	}
}
