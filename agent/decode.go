package agent

import (
	"github.com/bermsec/berm/agent/wire"
)

// The decoders are registered by the packages that own each kind of record (tracer, netguard,
// lsm), all of which the agent imports.
var (
	decode     = wire.Decode
	peekHeader = wire.Header
)
