package sandboxer

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/sandboxer/sandboxinit"
	"github.com/bermsec/berm/testenv/bermbin"
)

// The user namespace the stage's binary makes (mappingUserns) idmaps a real mount as the
// workspace needs: the owner's files show as the sandbox's host ids, the sandbox's ids' files
// as the owner's, anyone else's as themselves.
func TestMappingUsernsIdmapsTheOwnerToTheSandboxAndNoOneElse(t *testing.T) {
	bermbin.RequireRoot(t)
	stage := bermbin.Path(t, sandboxinit.StageBinary)
	const owner, host, other = 1000, 3_900_000, 4242
	dir := t.TempDir()
	for name, id := range map[string]int{"owners": owner, "hosts": host, "others": other} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, id, id+1); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := mappingUserns(stage, owner, host, owner+1, host+1)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ns)
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}); err != nil {
		t.Skipf("idmapped mounts not supported on %s's file system: %v", dir, err)
	}
	for _, c := range []struct {
		name     string
		uid, gid uint32
	}{
		{"owners", host, host + 1},
		{"hosts", owner, owner + 1},
		{"others", other, other + 1},
	} {
		var st unix.Stat_t
		if err := unix.Fstatat(tree, c.name, &st, 0); err != nil {
			t.Fatal(err)
		}
		if st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s's file shows as %d:%d through the idmapped mount, want %d:%d", c.name, st.Uid, st.Gid, c.uid, c.gid)
		}
	}
}
