// buildgrafana builds the Grafana server the tests run (testenv/grafana.Home) ahead of them,
// so that its minutes of compiling are not spent inside a test, or under a shared lock.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/bermsec/berm/testenv/grafana"
)

func main() {
	start := time.Now()
	home, err := grafana.Home(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("grafana %s in %s (%s)\n", grafana.Version, home, time.Since(start).Round(time.Second))
}
