package rules

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// LintMain implements `berm rules lint [--shipped] PATH...`: loads the files and prints every
// problem as file:line:column. Exit status 0 clean, 1 problems, 2 usage.
func LintMain(args []string, stdout, stderr io.Writer) int {
	set, code := loadForCLI("lint", args, stdout, stderr)
	if set == nil {
		return code
	}
	fmt.Fprintf(stdout, "ok: %d rules in %d files\n", len(set.Rules()), len(set.Files()))
	return 0
}

// TestMain implements `berm rules test [--shipped] [-v] PATH...`: runs every rule's embedded
// tests and prints a summary. Exit status 0 all passed, 1 failures, 2 usage.
func TestMain(args []string, stdout, stderr io.Writer) int {
	set, code := loadForCLI("test", args, stdout, stderr, "v")
	if set == nil {
		return code
	}
	verbose := false
	for _, a := range args {
		if a == "-v" || a == "--v" {
			verbose = true
		}
	}
	results := set.RunTests()
	failed := 0
	perRule := map[string]bool{}
	for _, r := range results {
		if r.Failed() {
			failed++
			perRule[r.Rule] = true
		}
		if r.Failed() || verbose {
			fmt.Fprintln(stdout, r.String())
		}
	}
	fmt.Fprintf(stdout, "%d rules, %d tests: %d passed, %d failed (%d rules failing)\n",
		len(set.Rules()), len(results), len(results)-failed, failed, len(perRule))
	if failed > 0 {
		return 1
	}
	return 0
}

func loadForCLI(name string, args []string, stdout, stderr io.Writer, boolFlags ...string) (*Set, int) {
	fs := flag.NewFlagSet("berm rules "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	shipped := fs.Bool("shipped", false, "include the embedded ruleset (its lists and macros are then usable)")
	for _, b := range boolFlags {
		fs.Bool(b, false, "verbose: print every test case")
	}
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: berm rules %s [--shipped] [-v] PATH...\n", name)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	// -h is the usage on stdout and success; a bad flag one line, not the usage around it.
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		usage(stdout)
		return nil, 0
	} else if err != nil {
		fmt.Fprintf(stderr, "berm rules %s: %v (berm rules %s -h lists the flags)\n", name, err, name)
		return nil, 2
	}
	paths := fs.Args()
	if len(paths) == 0 && !*shipped {
		usage(stderr)
		return nil, 2
	}
	var set *Set
	var err error
	switch {
	case *shipped && len(paths) == 0:
		set, err = Shipped()
	case *shipped:
		set, err = LoadWithShipped(paths...)
	default:
		set, err = LoadFiles(paths...)
	}
	if err != nil {
		var le *LoadError
		if errors.As(err, &le) {
			for _, is := range le.Issues {
				fmt.Fprintln(stderr, is.String())
			}
			fmt.Fprintf(stderr, "%d problem(s)\n", len(le.Issues))
		} else {
			fmt.Fprintln(stderr, err)
		}
		return nil, 1
	}
	return set, 0
}
