// Command berm-full is berm's whole command line: every command, and `berm run` with the
// agent embedded. The berm front (cmd/berm) executes it for everything but a call handed to
// bermd; users run `berm`.
package main

import (
	"fmt"
	"os"

	"github.com/bermsec/berm/sandboxer/sandboxinit"
)

const usage = `berm — sandbox, trace and audit AI tool calls

usage:
  berm run [flags] -- CMD [ARGS...]    run a tool call in its own sandbox
  berm calls [flags]                   list calls
  berm timeline [flags] CALL_ID        print a call's events in order
  berm matrix [flags]                  the tools x surfaces matrix: each surface's worst state per tool
  berm doctor [--json]                 what this kernel lets berm use, and what berm needs of it
  berm approvals [--json]              actions held for a person's decision (spec.approvals)
  berm approve|deny ID [--reason T]    decide one
  berm mcp serve|proxy [flags]         MCP: berm's run tool for agents; an MCP server behind berm
  berm policy check FILE...            check policy files
  berm policy diff A B                 what differs between two policies (strict: the built-in)
  berm policy show-strict              print the built-in strict policy
  berm rules lint|test PATH...         check detection rules, run their tests
  berm version [--json]                berm's version, commit, Go and kernel features (also --version)
  berm help                            this text (also -h, --help)

every command takes -h; the reading commands take --state-dir DIR (default /var/lib/berm).
`

func main() {
	// The sandbox init is this binary, re-executed inside the call's namespaces.
	if len(os.Args) > 0 && os.Args[0] == sandboxinit.Arg0 {
		sandboxinit.Main()
		return
	}
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) int{
		"run":       cmdRun,
		"calls":     cmdCalls,
		"timeline":  cmdTimeline,
		"matrix":    cmdMatrix,
		"doctor":    cmdDoctor,
		"version":   cmdVersion,
		"--version": cmdVersion,
		"-version":  cmdVersion,
	}
	for name, fn := range extraCommands {
		cmds[name] = fn
	}
	fn, ok := cmds[os.Args[1]]
	if !ok {
		if isHelp(os.Args[1]) {
			fmt.Print(usage)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "berm: unknown command %q (berm -h lists the commands)\n", os.Args[1])
		os.Exit(2)
	}
	os.Exit(fn(os.Args[2:]))
}

// extraCommands are registered by the files of later capabilities (policy, rules).
var extraCommands = map[string]func([]string) int{}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "berm: "+format+"\n", args...)
	return 1
}
