package main

import (
	"flag"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
)

// cmdMatrix prints the tools x surfaces matrix of the calls that started in the window.
func cmdMatrix(args []string) int {
	fs := flag.NewFlagSet("matrix", flag.ContinueOnError)
	cf := addCallFlags(fs, "24h", "calls started since: a duration ago (24h) or an RFC 3339 time")
	surface := fs.String("surface", "", "only this surface's column")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail("matrix takes no arguments, got %q", fs.Arg(0))
	}
	if *surface != "" && !slices.Contains(event.Surfaces, *surface) {
		return fail("--surface: expected one of %v, got %q", event.Surfaces, *surface)
	}
	f, src, closeSrc, err := cf.open()
	if err != nil {
		return fail("%v", err)
	}
	defer closeSrc()
	rows, err := audit.SourceMatrixRows(src, f, *surface)
	if err != nil {
		return fail("%v", err)
	}
	m := audit.FoldMatrix(rows)
	reasons, err := audit.SourceMatrixReasons(src, f, *surface)
	if err != nil {
		return fail("%v", err)
	}
	m.AddReasons(reasons)
	if *surface != "" {
		m = m.Only(*surface)
	}
	if *cf.asJSON {
		err = audit.PrintMatrixJSON(os.Stdout, m)
	} else {
		err = audit.PrintMatrix(os.Stdout, m, colourOut())
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

// colourOut: stdout is a terminal and NO_COLOR (no-color.org) is not set.
func colourOut() bool {
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return false
	}
	_, err := unix.IoctlGetTermios(int(os.Stdout.Fd()), unix.TCGETS)
	return err == nil
}
