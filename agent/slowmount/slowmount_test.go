package slowmount

import (
	"strings"
	"testing"
)

func TestParseNamesEachMountAndWhetherOneIsSlow(t *testing.T) {
	const table = `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 22 0:33 / /run/s rw,nosuid shared:20 - fuse.slowfs slowfs rw,user_id=0
36 22 0:34 / /mnt/n rw - nfs4 host:/x rw
`
	for _, tc := range []struct {
		name   string
		table  string
		slow   bool
		mounts int
	}{
		{"a table with a FUSE and an NFS mount holds a slow file system", table, true, 3},
		{"a table of local file systems holds none", strings.SplitN(table, "\n", 2)[0] + "\n", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, slow, err := Parse(strings.NewReader(tc.table))
			if err != nil {
				t.Fatal(err)
			}
			if slow != tc.slow || len(m) != tc.mounts {
				t.Errorf("slow %v with %d mounts, want %v with %d", slow, len(m), tc.slow, tc.mounts)
			}
		})
	}
	m, _, _ := Parse(strings.NewReader(table))
	if got := m[35]; got.FSType != "fuse.slowfs" || got.Point != "/run/s" || !SlowType(got.FSType) || SlowType(m[22].FSType) {
		t.Errorf("mount 35 %+v, mount 22 %+v", got, m[22])
	}
	if _, _, err := Parse(strings.NewReader("garbage\n")); err == nil {
		t.Error("a malformed line parsed")
	}
}

// The process's own root is on a mount the host table knows (and, on a machine whose root is
// local, not a slow one); a mount it does not know counts as slow.
func TestTheHostTableKnowsTheRootsMount(t *testing.T) {
	st, err := Probe(-100, "/")
	if err != nil {
		t.Fatal(err)
	}
	if st.MntID == 0 {
		t.Skip("this kernel gives no mount id")
	}
	if on := HostTable.Slow(st.MntID); on != nil && strings.Contains(on.FSType, "unknown") {
		t.Errorf("/ is on a mount the table does not know: %s", on)
	}
	if on := HostTable.Slow(1 << 62); on == nil || !strings.Contains(on.FSType, "unknown") {
		t.Errorf("an unknown mount is not counted as slow: %v", on)
	}
}
