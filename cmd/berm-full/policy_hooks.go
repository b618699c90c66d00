package main

import (
	"fmt"
	"os"

	"github.com/bermsec/berm/agent/policy"
)

func init() {
	extraCommands["policy"] = cmdPolicy
}

func cmdPolicy(args []string) int {
	const use = "usage: berm policy check FILE...   |   berm policy diff A B   |   berm policy show-strict"
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Println(use)
		return 0
	}
	if len(args) > 0 && args[0] == "diff" {
		return policy.DiffMain(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) == 0 || (args[0] != "check" && args[0] != "show-strict") {
		fmt.Fprintln(os.Stderr, use)
		return 2
	}
	if args[0] == "show-strict" {
		os.Stdout.Write(policy.StrictYAML())
		return 0
	}
	return policy.CheckMain(args[1:], os.Stdout, os.Stderr)
}
