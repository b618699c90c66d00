package runcli

import (
	"os"

	"github.com/bermsec/berm/cmd/internal/ptyrelay"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Terminal gives the call a pty of its own when berm's stdin is a terminal (nil when it is
// not) and says so in the request: the launcher hands the pty to the tool, and the caller's
// terminal stays in this process. The caller must Close it when the call has ended, on every
// path: that restores the terminal's settings.
func (o *Options) Terminal() (*ptyrelay.Relay, error) {
	r, err := ptyrelay.Start(os.Stdin)
	if r != nil {
		o.Request.Terminal = &callproto.Terminal{Stdout: ptyrelay.IsTerminal(os.Stdout), Stderr: ptyrelay.IsTerminal(os.Stderr)}
	}
	return r, err
}
