package main

import (
	"flag"

	"github.com/bermsec/berm/sandboxer"
)

var (
	warmMaxTenant = flag.Int("warm-max-tenant", sandboxer.DefaultMaxPerTenant, "warm sandboxes one tenant's demand may grow to (back-to-back calls, bursts)")
	warmMax       = flag.Int("warm-max", sandboxer.DefaultMaxTotal, "warm sandboxes on the node, all tenants (beyond each tenant's --warm)")
)
