package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/probe"
)

func cmdDoctor(args []string) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "JSON output")
	fs.String("state-dir", "/var/lib/berm", "state directory (unused)")
	if code, done := parseFlags(fs, args); done {
		return code
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
	var refused []probe.Feature
	for _, f := range r.Features {
		status, detail := "ok", f.Detail
		if !f.OK {
			status = "NO"
			refused = append(refused, f)
			if r.Cause(f) != "" {
				detail = "see below"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, f.Kind, status, detail)
	}
	tw.Flush()
	fmt.Printf("\nlayers available: %s\n", strings.Join(r.Layers, ", "))
	if len(r.Missing) > 0 {
		fmt.Printf("layers refused by this kernel: %s\n", strings.Join(r.Missing, ", "))
	}
	fmt.Printf("paths of unlink, rename, rmdir, mkdir, mknod, truncate: %s\n", r.PathView())
	// Each refusal: why (what can be checked, not the library's generic hint) and whether berm
	// needs what is missing.
	required := 0
	for _, f := range refused {
		fmt.Printf("\n%s: refused", f.Name)
		if c := r.Cause(f); c != "" {
			fmt.Printf(": %s\n  (the kernel said: %s)", c, f.Detail)
		} else {
			fmt.Printf(": %s", f.Detail)
		}
		n := probe.Need(f.Name)
		if n == "" {
			n = "unknown to this berm"
		}
		fmt.Printf("\n  berm: %s\n", n)
		if strings.HasPrefix(n, "required") {
			required++
		}
	}
	if required > 0 {
		fmt.Printf("\n%d refused features are ones berm requires (for the calls named)\n", required)
	} else {
		fmt.Println("\nnothing berm requires is missing")
	}
	return 0
}
