package sandboxer

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// callQuota is what a call may leave on its workspace's file system: a budget of blocks and
// inodes it may add while it runs (diskBudget). Nothing is looked for after the call: setuid
// and setgid modes (the launcher's set-id filter) and FIFOs, sockets and devices (Landlock,
// unless spec.filesystem.allowSpecialFiles) are refused when they are made, so a workspace's
// size costs the end of a call nothing.
//
// Why a measured budget and not project quotas: a project quota counts only inodes carrying
// the call's project id, and files inherit the id from their directory when created. Existing
// files and directories of the workspace carry none, so `fallocate -l 4G old-dir/x` or growing
// an existing file would escape it unless every inode of the workspace were relabelled first:
// a walk of the whole workspace on every launch, the cost issue 11 asks launches to shed.
// (And most hosts, this one included, mount their file systems without prjquota.)
//
// The measured budget is constant-time per sample: fstatfs of the workspace's file system,
// against a baseline taken before the tool starts, every 20 ms and once more after the call.
// The trade-off is that a file system's counters are shared: whatever else writes to it
// during the call (the host, another call on the same file system) counts against the call,
// and whatever is freed during it gives the call room. It errs towards ending the call (fails
// closed) and is exact for a workspace on a file system of its own. What the tool allocates
// between two samples (a 4 GiB fallocate takes 10 ms) is allocated before the call ends: the
// budget bounds how long the file system stays over it, not the peak. A file system with no
// space left for unprivileged users ends the call too: it is then writing into the blocks
// reserved for root (or for the uid the file system reserves them for).
type callQuota struct {
	// dir is the workspace directory (O_PATH) on the host's mount of it: resolved as
	// openWorkspace resolved it, at the same time.
	dir  int
	disk diskBudget
}

// newCallQuota opens the workspace for the call's quota and takes the budget's baseline; the
// tool must not have started yet.
func newCallQuota(workspace string, c *policy.Compiled) (*callQuota, error) {
	dir, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s for its quota: %w", workspace, err)
	}
	q := &callQuota{dir: dir}
	q.disk = diskBudget{bytes: c.Limits.DiskBytes, inodes: c.Limits.Inodes}
	if err := q.disk.baseline(dir); err != nil {
		unix.Close(dir)
		return nil, fmt.Errorf("workspace %s: %w", workspace, err)
	}
	return q, nil
}

func (q *callQuota) close() {
	if q != nil && q.dir >= 0 {
		unix.Close(q.dir)
		q.dir = -1
	}
}

// exceeded samples the budget: the end detail and the limit event when the call is over it.
func (q *callQuota) exceeded() (string, *event.Limit) {
	if q == nil {
		return "", nil
	}
	return q.disk.exceeded(q.dir)
}

// diskBudget is a call's allowance on its workspace's file system (see callQuota).
type diskBudget struct {
	bytes, inodes int64 // what the call may add; 0 is no budget
	// At the baseline: blocks and inodes in use, and whether unprivileged users had room.
	usedBlocks, usedInodes uint64
	hadSpace, hadInodes    bool
}

func (b *diskBudget) baseline(dir int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs for the disk budget: %w", err)
	}
	b.usedBlocks, b.usedInodes = fs.Blocks-fs.Bfree, fs.Files-fs.Ffree
	b.hadSpace, b.hadInodes = fs.Blocks > 0 && fs.Bavail > 0, fs.Files > 0 && fs.Ffree > 0
	return nil
}

func (b *diskBudget) exceeded(dir int) (string, *event.Limit) {
	var fs unix.Statfs_t
	if unix.Fstatfs(dir, &fs) != nil {
		return "", nil
	}
	unit := fs.Frsize
	if unit <= 0 {
		unit = fs.Bsize
	}
	// Signed: the host may free more than the call adds.
	added := (int64(fs.Blocks-fs.Bfree) - int64(b.usedBlocks)) * unit
	addedInodes := int64(fs.Files-fs.Ffree) - int64(b.usedInodes)
	switch {
	case b.bytes > 0 && added > b.bytes:
		return fmt.Sprintf("workspace disk budget of %d bytes (its file system gained %d bytes during the call)", b.bytes, added),
			&event.Limit{Resource: event.ResourceDisk, Limit: b.bytes, Detail: fmt.Sprintf("%d bytes added", added)}
	case b.inodes > 0 && addedInodes > b.inodes:
		return fmt.Sprintf("workspace inode budget of %d (its file system gained %d inodes during the call)", b.inodes, addedInodes),
			&event.Limit{Resource: event.ResourceInodes, Limit: b.inodes, Detail: fmt.Sprintf("%d inodes added", addedInodes)}
	case b.hadSpace && fs.Bavail == 0:
		return "the workspace's file system has no space left for unprivileged users",
			&event.Limit{Resource: event.ResourceDisk, Limit: b.bytes, Detail: "file system full: writing into reserved blocks"}
	case b.hadInodes && fs.Ffree == 0:
		return "the workspace's file system has no inodes left",
			&event.Limit{Resource: event.ResourceInodes, Limit: b.inodes, Detail: "file system out of inodes"}
	}
	return "", nil
}
