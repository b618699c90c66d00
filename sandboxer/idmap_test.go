package sandboxer

import (
	"syscall"
	"testing"
)

// mapID applies a user namespace's map to an id inside it: the host id, or false.
func mapID(m []syscall.SysProcIDMap, id uint64) (uint64, bool) {
	for _, e := range m {
		if id >= uint64(e.ContainerID) && id < uint64(e.ContainerID)+uint64(e.Size) {
			return uint64(e.HostID) + id - uint64(e.ContainerID), true
		}
	}
	return 0, false
}

// The workspace's idmap maps its owner to the sandbox's host id and every other id to one the
// tool's namespace does not map (a valid owner the tool is not: its deletions read EPERM, not
// EOVERFLOW), each to exactly one.
func TestIdmapSwapMapsEveryIdOnceAndOnlyTheOwnerToTheTool(t *testing.T) {
	for _, c := range []struct {
		name     string
		id, host uint32
	}{
		{"owner below the sandbox's id", 1000, 200000},
		{"owner above the sandbox's id", 300000, 200000},
		{"owner root", 0, 200000},
		{"owner the largest id", maxID - 1, 200000},
		{"sandbox id zero", 1000, 0},
		{"the same id", 4242, 4242},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := idmapSwap(c.id, c.host)
			if len(m) > 5 {
				t.Errorf("%d extents: kernels before 4.15 take 5", len(m))
			}
			var inside, hosts uint64
			for i, e := range m {
				inside += uint64(e.Size)
				hosts += uint64(e.Size)
				for _, f := range m[i+1:] {
					if overlap(e.ContainerID, e.Size, f.ContainerID, f.Size) || overlap(e.HostID, e.Size, f.HostID, f.Size) {
						t.Errorf("extents %+v and %+v overlap", e, f)
					}
				}
				if uint64(e.ContainerID)+uint64(e.Size) > maxID || uint64(e.HostID)+uint64(e.Size) > maxID {
					t.Errorf("extent %+v maps (uid_t)-1", e)
				}
			}
			if inside != maxID {
				t.Errorf("%d ids mapped, want every valid id (%d)", inside, uint64(maxID))
			}
			if got, ok := mapID(m, uint64(c.id)); !ok || got != uint64(c.host) {
				t.Errorf("owner %d maps to %d (%v), want the sandbox's %d", c.id, got, ok, c.host)
			}
			for _, other := range []uint64{0, 1, 65534, uint64(c.host), uint64(c.id) + 1, maxID - 1} {
				if other == uint64(c.id) || other >= maxID {
					continue
				}
				if got, ok := mapID(m, other); !ok || got == uint64(c.host) {
					t.Errorf("id %d maps to %d (%v): unmapped, or the tool's own", other, got, ok)
				}
			}
		})
	}
}

func overlap(a, an, b, bn int) bool { return a < b+bn && b < a+an }
