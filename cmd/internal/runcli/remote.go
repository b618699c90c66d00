package runcli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bermsec/berm/agent/daemon/callproto"
)

// Remote hands the call to bermd, which launches it with this process's stdio, and waits for
// its end. SIGINT and SIGTERM are passed on: the call ends as interrupted.
func (o *Options) Remote() int {
	if len(o.Rules) > 0 || o.NoRules {
		// Not silently: the caller asked for something this call will not get.
		fmt.Fprintln(os.Stderr, "berm: warning: --rules and --no-rules are for the embedded agent; bermd evaluates its own ruleset (bermd --rules, --no-rules)")
	}
	if o.ApprovalWebhook != "" {
		fmt.Fprintln(os.Stderr, "berm: warning: --approval-webhook is for the embedded agent; bermd posts to its own (bermd --approval-webhook)")
	}
	if o.conn != nil {
		defer o.conn.Close() // a call that is not sent
	}
	cleanup, err := o.Resolve()
	defer cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stdio := [3]*os.File{os.Stdin, os.Stdout, os.Stderr}
	term, err := o.Terminal()
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: %v\n", err)
		return 1
	}
	if term != nil {
		// bermd gets the pty's master in place of the caller's terminal, which stays here.
		defer term.Close()
		stdio[0] = term.Master
	}
	var rep *callproto.Reply
	if o.conn != nil {
		rep, err = o.conn.Run(&o.Request, stdio, sigs)
	} else {
		rep, err = callproto.Run(o.Socket, &o.Request, stdio, sigs)
	}
	if term != nil {
		term.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: %v\n", err)
		return 1
	}
	if rep.Record == nil {
		// The call did not run (a bad request, a policy that does not compile): berm's own
		// failure, the same status as with the agent embedded.
		fmt.Fprintf(os.Stderr, "berm: %s\n", rep.Error)
		return 1
	}
	return o.Finish(rep.Record, rep.ExitStatus, rep.Warning)
}
