package qemu

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Entry is one file of an initramfs.
type Entry struct {
	Name string      // without a leading slash
	Mode fs.FileMode // type and permissions
	Data []byte      // regular files; the target for symlinks
	Rdev [2]uint32   // major, minor of device nodes
}

// Dir, File, Symlink and CharDev make entries.
func Dir(name string) Entry { return Entry{Name: name, Mode: fs.ModeDir | 0o755} }
func File(name string, mode fs.FileMode, data []byte) Entry {
	return Entry{Name: name, Mode: mode & fs.ModePerm, Data: data}
}
func Symlink(name, target string) Entry {
	return Entry{Name: name, Mode: fs.ModeSymlink | 0o777, Data: []byte(target)}
}
func CharDev(name string, major, minor uint32) Entry {
	return Entry{Name: name, Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Rdev: [2]uint32{major, minor}}
}

// WriteCPIO writes entries as a cpio archive in the "newc" format the kernel unpacks into its
// initial root file system (what `cpio -H newc -o` makes). Written in Go, it needs neither
// the cpio tool nor root for the device nodes.
func WriteCPIO(w io.Writer, entries []Entry) error {
	for i, e := range entries {
		if err := writeEntry(w, uint32(i+1), e); err != nil {
			return fmt.Errorf("cpio entry %s: %w", e.Name, err)
		}
	}
	return writeEntry(w, 0, Entry{Name: "TRAILER!!!"})
}

func writeEntry(w io.Writer, ino uint32, e Entry) error {
	name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
	if e.Name == "TRAILER!!!" {
		name = e.Name
	}
	mode := uint32(e.Mode.Perm())
	switch {
	case e.Mode&fs.ModeDir != 0:
		mode |= 0o040000
	case e.Mode&fs.ModeSymlink != 0:
		mode |= 0o120000
	case e.Mode&fs.ModeCharDevice != 0:
		mode |= 0o020000
	case e.Mode&fs.ModeDevice != 0:
		mode |= 0o060000
	case e.Name != "TRAILER!!!":
		mode |= 0o100000
	}
	nlink := uint32(1)
	if e.Mode&fs.ModeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(e.Data), 0, 0, e.Rdev[0], e.Rdev[1], len(name)+1, 0)
	// header + name + NUL padded to 4 bytes, then the data padded to 4 bytes
	buf := make([]byte, 0, len(hdr)+len(name)+4+len(e.Data)+3)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, e.Data...)
	buf = pad4(buf)
	_, err := w.Write(buf)
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// initScript mounts what berm's programs and tests use, runs the test binary and powers off.
// The markers let the host tell a test failure from a VM that never got that far.
const initScript = `#!/bin/busybox sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t securityfs securityfs /sys/kernel/security
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t tmpfs tmp /tmp
echo "berm-vm: kernel $(uname -r) lsm=$(cat /sys/kernel/security/lsm)"
cd /tmp
BERM_IN_VM=1 /test.bin -test.v -test.count=1 -test.timeout=5m -test.run '%s'
echo "berm-vm: exit $?"
poweroff -f
`

// Initramfs builds the VM's root: busybox (static), the test binary as /test.bin and an
// /init that runs it with -test.run run.
func Initramfs(w io.Writer, busybox, testBin, run string) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	tb, err := os.ReadFile(testBin)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	entries := []Entry{
		Dir("bin"), Dir("dev"), Dir("proc"), Dir("sys"), Dir("tmp"), Dir("etc"),
		CharDev("dev/console", 5, 1), CharDev("dev/null", 1, 3),
		File("bin/busybox", 0o755, bb),
		File("test.bin", 0o755, tb),
		File("init", 0o755, []byte(fmt.Sprintf(initScript, run))),
	}
	for _, applet := range []string{"sh", "mount", "cat", "uname", "poweroff", "true", "echo"} {
		entries = append(entries, Symlink("bin/"+applet, "busybox"))
	}
	return WriteCPIO(w, entries)
}
