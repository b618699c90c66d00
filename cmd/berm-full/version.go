package main

import (
	"encoding/json"
	"flag"
	"os"

	"github.com/bermsec/berm/cmd/internal/version"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/probe"
)

// berm version [--json] [--no-probe]: the build, and what this kernel lets berm use.
func cmdVersion(args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output")
	noProbe := fs.Bool("no-probe", false, "leave out the kernel's features (probing loads eBPF programs, as root)")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	var kernel *probe.Report
	if !*noProbe {
		kernel = sandboxer.ProbeKernel()
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		v := struct {
			version.Info
			Kernel *probe.Report `json:"kernel,omitempty"`
		}{version.Read(), kernel}
		if err := enc.Encode(v); err != nil {
			return fail("%v", err)
		}
		return 0
	}
	version.Write(os.Stdout, "berm", kernel)
	return 0
}
