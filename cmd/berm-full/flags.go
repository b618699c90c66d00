package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// synopsis is each command's usage line, as the top-level usage lists it.
var synopsis = map[string]string{
	"calls":     "berm calls [flags]",
	"timeline":  "berm timeline [flags] CALL_ID|CALL_KEY|TENANT/CALL_ID",
	"matrix":    "berm matrix [flags]",
	"doctor":    "berm doctor [--json]",
	"approvals": "berm approvals [--json]",
	"approve":   "berm approve ID [--reason TEXT]",
	"deny":      "berm deny ID [--reason TEXT]",
	"version":   "berm version [--json]",
}

// parseFlags parses a command's flags the same way for every command: -h or --help prints
// its usage on stdout and succeeds; a bad flag is one line on stderr (not the flag package's
// error, the whole usage, then the error again) and exit 2. done says the command ends here,
// with code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs)
		return 0, true
	case err != nil:
		fmt.Fprintf(os.Stderr, "berm %s: %v (berm %s -h lists the flags)\n", fs.Name(), err, fs.Name())
		return 2, true
	}
	return 0, false
}

func printUsage(fs *flag.FlagSet) {
	line := synopsis[fs.Name()]
	if line == "" {
		line = "berm " + fs.Name() + " [flags]"
	}
	fmt.Printf("usage: %s\n\nflags:\n", line)
	fs.SetOutput(os.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// isHelp says whether an argument asks for help.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }
