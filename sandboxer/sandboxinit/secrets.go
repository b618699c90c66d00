package sandboxinit

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SecretFile is a brokered credential delivered as a file: it is written on a tmpfs of the
// call's own, mounted over its directory in the call's mount namespace only, 0400 and owned by
// the call's host uid (the tool's uid inside its user namespace). Nothing of it is on a disk,
// and no other call's namespace shows it.
type SecretFile struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// mountSecrets delivers cfg's secret files under root (the call's root, at newRoot before the
// pivot or at "/" after it), or on the host's root in audit mode (cfg.HostRoot), where the
// directory must exist: nothing is made there.
func mountSecrets(root string, cfg *Config) error {
	mounted := map[string]bool{}
	for _, s := range cfg.Secrets {
		dir := filepath.Join(root, filepath.Dir(s.Path))
		if !mounted[dir] {
			if cfg.HostRoot {
				if st, err := os.Stat(dir); err != nil || !st.IsDir() {
					return fmt.Errorf("deliver credential file %s: audit mode shows the host's file system, and %s is not a directory there", s.Path, filepath.Dir(s.Path))
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("deliver credential file %s: %w", s.Path, err)
			}
			// Read-only to the tool by its mode (root's, 0555): it cannot add files next to
			// the secret; the launcher can still remove it when its time is up.
			if err := unix.Mount("berm-secrets", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,nr_inodes=64,mode=0555"); err != nil {
				return fmt.Errorf("deliver credential file %s: mount tmpfs: %w", s.Path, err)
			}
			mounted[dir] = true
		}
		p := filepath.Join(root, s.Path)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o400)
		if err != nil {
			return fmt.Errorf("deliver credential file %s: %w", s.Path, err)
		}
		_, err = f.Write(s.Data)
		if err == nil {
			err = f.Chown(int(cfg.HostUID), int(cfg.HostGID))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("deliver credential file %s: %w", s.Path, err)
		}
	}
	return nil
}
