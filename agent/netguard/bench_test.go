package netguard

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkAttachClose is the network layer's share of a call's launch and end: install a
// policy for a registered cgroup below the root the programs are attached to, then remove it.
// With drained, each iteration also waits for the background deletion of the removed version
// (an RCU grace period, then the deletes): the work no call waits for, counted all the same.
func BenchmarkAttachClose(b *testing.B) {
	for _, bc := range []struct {
		rules   int
		drained bool
	}{{0, false}, {100, false}, {0, true}, {100, true}} {
		name := fmt.Sprintf("rules=%d", bc.rules)
		if bc.drained {
			name += "/drained"
		}
		rules := bc.rules
		b.Run(name, func(b *testing.B) {
			c := newCallAt(b, false, true)
			var egress strings.Builder
			for i := range rules {
				fmt.Fprintf(&egress, "      - {cidr: 10.%d.%d.0/24, ports: [%d]}\n", i/256, i%256, 1000+i)
			}
			pol := compileNet(b, "enforce", egress.String())
			b.ResetTimer()
			for b.Loop() {
				cn, err := c.g.Attach(c.dir, c.id, &pol.Network, false)
				if err != nil {
					b.Fatal(err)
				}
				if err := cn.Close(); err != nil {
					b.Fatal(err)
				}
				if bc.drained {
					c.g.gc.flush()
				}
			}
			b.ReportMetric(float64(len(pol.Network.Prefixes)), "prefixes")
		})
	}
}
