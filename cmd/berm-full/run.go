package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/cmd/internal/runcli"
	"github.com/bermsec/berm/sandboxer"
)

func cmdRun(args []string) int {
	o, err := runcli.Parse(args)
	if errors.Is(err, runcli.ErrHelpRequested) {
		return 0
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			return fail("%v", err)
		}
		return 2
	}
	if os.Geteuid() != 0 {
		return fail("run needs root (cgroups, namespaces, eBPF): try sudo")
	}
	if o.UseDaemon() {
		return o.Remote()
	}
	// berm's own lines from here on go to --messages (stderr when not given).
	msgs := o.MessageWriter()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(msgs, "berm: "+format+"\n", args...)
		return 1
	}
	// The embedded default: the agent (and rules) in this process, the journal as the store.
	cleanup, err := o.Resolve()
	defer cleanup()
	if err != nil {
		return fail("%v", err)
	}
	spec, err := sandboxer.FromRequest(&o.Request)
	if err != nil {
		return fail("%v", err)
	}
	if spec.Init, err = initBinary(); err != nil {
		return fail("%v", err)
	}
	spec.Stdin, spec.Stdout, spec.Stderr, spec.Messages = os.Stdin, os.Stdout, os.Stderr, msgs
	log := slog.New(slog.NewTextHandler(msgs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ev, stopRules, err := loadRunRules(o.Rules, o.NoRules, log)
	if err != nil {
		return fail("%v", err)
	}
	defer stopRules()
	a, err := sandboxer.NewAgent(agent.Config{StateDir: o.StateDir, Logger: log, Rules: ev})
	if err != nil {
		return fail("load agent: %v", err)
	}
	defer a.Close()
	// Started last: from here to its Close the caller's terminal is in raw mode.
	term, err := o.Terminal()
	if err != nil {
		return fail("%v", err)
	}
	if term != nil {
		defer term.Close()
		spec.Stdin, spec.Terminal = term.Master, o.Request.Terminal
		// The tool's output to the terminal waits while a question is open at it.
		spec.Stdout, spec.Stderr = term.Hold(os.Stdout), term.Hold(os.Stderr)
	}
	var stopApprovals func() error
	if spec.Approvals, stopApprovals, err = embeddedApprovals(spec, log, msgs, term, a.Secrets(), o.ApprovalWebhook, o.ApprovalWebhookSecret); err != nil {
		return fail("%v", err)
	}
	defer stopApprovals()
	out, err := sandboxer.Run(spec, sandboxer.Local{Agent: a})
	if term != nil {
		term.Close()
	}
	if out == nil {
		return fail("%v", err)
	}
	warning := ""
	if err != nil {
		warning = err.Error()
	}
	return o.Finish(out.Record, out.ExitStatus, warning)
}

// initBinary is berm-init beside this binary, or this binary (which serves as the init when
// re-executed under that name): the small one starts faster, once per call.
func initBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary: %w", err)
	}
	if p := filepath.Join(filepath.Dir(self), "berm-init"); isExecutable(p) {
		return p, nil
	}
	return self, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
