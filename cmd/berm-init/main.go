// Command berm-init is the first process of every berm tool call, started by `berm run` inside
// the call's namespaces and cgroup. It is not meant to be run by hand.
package main

import "github.com/bermsec/berm/sandboxer/sandboxinit"

func main() { sandboxinit.Main() }
