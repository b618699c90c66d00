// Command berm-front is berm's Go front, which the C front (cmd/berm) executes for what it
// does not do itself: a terminal on stdin (the pty relay), a bermd started on demand, a
// caller that is not root when no bermd answers, every command but run. It links only what handing a call to
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
	"github.com/bermsec/berm/sandboxer/callproto"
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
		// A caller that is not root is served by a bermd that answers, if its access file
		// lets it (bermd decides); without one, the embedded agent needs root.
		if o.ViaDaemon() {
			os.Exit(o.Remote())
		}
		if os.Geteuid() != 0 {
			if c, err := callproto.Dial(o.Socket); err == nil {
				c.Close()
			} else if errors.Is(err, syscall.EACCES) {
				fmt.Fprintf(os.Stderr, "berm: bermd at %s does not serve uid %d (it serves root and the users and groups its --access file names): try sudo\n", o.Socket, os.Geteuid())
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "berm: run needs root (cgroups, namespaces, eBPF) when no bermd answers at %s: try sudo, or run bermd with an --access file that names you\n", o.Socket)
			os.Exit(1)
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
