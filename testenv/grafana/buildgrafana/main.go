// buildgrafana builds the Grafana server the tests run (testenv/grafana.Home) ahead of them,
// so that its minutes of compiling are not spent inside a test, or under a shared lock; with
// -frontend, its web frontend too (testenv/grafana.Frontend), which the browser tests serve.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bermsec/berm/testenv/grafana"
)

func main() {
	frontend := flag.Bool("frontend", false, "build the web frontend too")
	flag.Parse()
	start := time.Now()
	home, err := grafana.Home(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("grafana %s in %s (%s)\n", grafana.Version, home, time.Since(start).Round(time.Second))
	if *frontend {
		start = time.Now()
		public, err := grafana.Frontend(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("grafana's frontend in %s (%s)\n", public, time.Since(start).Round(time.Second))
	}
}
