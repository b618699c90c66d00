package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/bermsec/berm/sandboxer"
)

func cmdDoctor(args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output")
	fs.String("state-dir", "/var/lib/berm", "state directory (unused)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	r := sandboxer.ProbeKernel()
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fail("%v", err)
		}
		return 0
	}
	fmt.Printf("kernel %s\n\n", r.Kernel)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FEATURE\tKIND\tSTATUS\tDETAIL")
	for _, f := range r.Features {
		status := "ok"
		if !f.OK {
			status = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, f.Kind, status, f.Detail)
	}
	tw.Flush()
	fmt.Printf("\nlayers available: %s\n", strings.Join(r.Layers, ", "))
	if len(r.Missing) > 0 {
		fmt.Printf("layers refused by this kernel: %s\n", strings.Join(r.Missing, ", "))
	}
	return 0
}
