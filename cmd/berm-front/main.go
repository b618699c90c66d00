// Command berm-front is berm's Go front, which the C front (cmd/berm) executes for what it
// does not do itself: a terminal on stdin (the pty relay), a bermd started on demand, a
// caller that is not root, every command but run. It links only what handing a call to
// bermd needs (cmd/internal/runcli). Every other command, and `berm run` with the agent
// embedded (no bermd), is berm-full's: this binary executes it from its own directory, with
// the same arguments.
//
// It runs for one call and its Go runtime need not keep a goroutine that re-sizes GOMAXPROCS
// to the cgroup's CPU quota while it waits for the call's end.
//
//go:debug updatemaxprocs=0
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/bermsec/berm/cmd/internal/runcli"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "run" {
		o, err := runcli.Parse(os.Args[2:])
		if errors.Is(err, runcli.ErrHelpRequested) {
			os.Exit(0)
		}
		if err != nil {
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(os.Stderr, "berm: %v\n", err)
			}
			os.Exit(2)
		}
		if os.Geteuid() != 0 {
			fmt.Fprintln(os.Stderr, "berm: run needs root (cgroups, namespaces, eBPF): try sudo")
			os.Exit(1)
		}
		if o.ViaDaemon() {
			os.Exit(o.Remote())
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "berm: find own binary: %v\n", err)
		os.Exit(1)
	}
	full := filepath.Join(filepath.Dir(self), "berm-full")
	err = syscall.Exec(full, append([]string{"berm"}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "berm: this command needs %s, installed beside berm (make build puts both in bin/): %v\n", full, err)
	os.Exit(1)
}
