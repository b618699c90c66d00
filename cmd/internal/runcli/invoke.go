package runcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/callproto"
)

// Invoke is berm run for the C front's bare invocation (callproto.InvokeMagic), read by bermd
// as the Go front reads its own: the same flags and defaults, the workspace and environment
// resolved in the caller's context (its working directory and environment as it sent them).
// A caller that is not root (inv.NonRoot) is bermd's to check (cmd/bermd/internal/access)
// once the request is resolved. ownSocket says whether
// a socket path (absolute) is the bermd reading this: a call meant for another bermd, or for
// the embedded agent, falls back to the Go front.
func Invoke(inv *callproto.Invocation, ownSocket func(string) bool) callproto.FrontCall {
	var errb bytes.Buffer
	c := Caller{Stderr: &errb, LookupEnv: inv.LookupEnv, Getwd: func() (string, error) { return invocationWd(inv) },
		NonRoot: inv.NonRoot, DefaultTenant: inv.DefaultTenant, Elsewhere: true}
	o, err := parseFor(inv.Args, c)
	if errors.Is(err, ErrHelpRequested) {
		return callproto.FrontCall{End: callproto.FrontEnd{Status: 0, Stderr: errb.Bytes()}}
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(&errb, "berm: %v\n", err)
		}
		return callproto.FrontCall{End: callproto.FrontEnd{Status: 2, Stderr: errb.Bytes()}}
	}
	// --messages names a descriptor or a file of the caller's: the Go front opens it in the
	// caller's own context, never bermd.
	if o.Messages != "" || o.Daemon == "never" || (o.StateDirGiven && o.Daemon != "required") {
		return callproto.FrontCall{Fallback: true}
	}
	if sock, err := c.abs(o.Socket); err != nil || !ownSocket(sock) {
		return callproto.FrontCall{Fallback: true}
	}
	fc := callproto.FrontCall{Early: remoteWarnings(o), FreshWorkspace: o.workspace == ""}
	cleanup, err := o.Resolve()
	fc.Cleanup = cleanup
	if err != nil {
		fc.End = callproto.FrontEnd{Status: 1, Stderr: fmt.Appendf(nil, "berm: %v\n", err)}
		return fc
	}
	fc.Request = &o.Request
	fc.Finish = func(rep callproto.Reply) callproto.FrontEnd {
		if rep.Record == nil {
			// The call did not run: berm's own failure, as Remote says it.
			return callproto.FrontEnd{Status: 1, Stderr: fmt.Appendf(nil, "berm: %s\n", rep.Error)}
		}
		r := rep.Record
		end := callEnd{CallID: r.CallID, EndReason: r.EndReason, EndDetail: r.EndDetail, Dropped: r.Dropped}
		fe := callproto.FrontEnd{Status: rep.ExitStatus}
		if !o.Quiet {
			fe.Stderr = endNotes(end, rep.ExitStatus, rep.Warning)
		}
		if o.Summary != "" {
			// The front writes the file itself, in its own context; bermd only encodes.
			data, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				fe.Stderr = fmt.Appendf(fe.Stderr, "berm: write summary: %v\n", err)
				if fe.Status == 0 {
					fe.Status = 1
				}
				return fe
			}
			fe.SummaryPath, fe.Summary = o.Summary, append(data, '\n')
		}
		return fe
	}
	return fc
}

// invocationWd is os.Getwd in the caller: $PWD when it names the caller's working directory
// (Go's rule, so a path through a symlink reads as the Go front reads it), else the
// directory's path.
func invocationWd(inv *callproto.Invocation) (string, error) {
	if inv.Cwd == nil {
		return "", errors.New("no working directory sent")
	}
	var dot unix.Stat_t
	if err := unix.Fstat(int(inv.Cwd.Fd()), &dot); err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	if pwd, ok := inv.LookupEnv("PWD"); ok && len(pwd) > 0 && pwd[0] == '/' {
		var st unix.Stat_t
		if unix.Stat(pwd, &st) == nil && st.Dev == dot.Dev && st.Ino == dot.Ino {
			return pwd, nil
		}
	}
	wd, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(inv.Cwd.Fd())))
	if err != nil || len(wd) == 0 || wd[0] != '/' {
		return "", fmt.Errorf("getwd: %w", unix.ENOENT)
	}
	var st unix.Stat_t
	if err := unix.Stat(wd, &st); err != nil || st.Dev != dot.Dev || st.Ino != dot.Ino {
		// removed, or not reachable from here as it is named there
		return "", fmt.Errorf("getwd: %w", unix.ENOENT)
	}
	return wd, nil
}
