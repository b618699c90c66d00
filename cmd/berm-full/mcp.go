package main

import (
	"fmt"
	"os"

	"github.com/bermsec/berm/cmd/internal/mcpserve"
)

const mcpUsage = `usage:
  berm mcp serve [--http ADDR --tokens FILE] [berm run flags]   berm's run tool for MCP clients
  berm mcp proxy [--per-call] [berm run flags] -- CMD [ARGS...]  an MCP server behind berm
`

func init() {
	extraCommands["mcp"] = func(args []string) int {
		if len(args) == 0 {
			fmt.Fprint(os.Stderr, mcpUsage)
			return 2
		}
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Print(mcpUsage)
			return 0
		}
		// Every call goes through bermd, which decides who may run what (root, or its
		// --access file for other users): no root needed here.
		switch args[0] {
		case "serve":
			return mcpserve.Serve(args[1:])
		case "proxy":
			return mcpserve.Proxy(args[1:])
		}
		fmt.Fprintf(os.Stderr, "berm mcp: unknown command %q\n%s", args[0], mcpUsage)
		return 2
	}
}
