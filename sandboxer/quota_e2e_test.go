package sandboxer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
)

// writePolicy writes a policy that differs from strict by spec (YAML under spec:).
func writePolicy(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	body := "apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata:\n  name: quota-test\nspec:\n" + spec
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func limitEvents(tl audit.TimelineJSON) []event.Limit {
	var out []event.Limit
	for _, e := range tl.Events {
		if e.Limit != nil {
			out = append(out, *e.Limit)
		}
	}
	return out
}

// A call that allocates past its workspace budget ends as disk_limit, whether it stays (and
// is killed) or exits right after the allocation (found when the call ends); a call within
// its budget is left alone.
func TestDiskBudgetEndsTheCall(t *testing.T) {
	bermbin.RequireRoot(t)
	// The budget is measured on the workspace's file system, and every call on that file system
	// sees what the others add: a test allocating gigabytes on the host's root file system
	// ends its neighbours' calls (other packages' tests run beside this one). So the allocations
	// past strict's 1 GiB happen on a file system of the case's own (ownFS), and the other
	// cases stay far under any neighbour's budget (64 MiB budgets, 256 MiB allocations).
	cases := []struct {
		name     string
		policy   string // spec: lines; empty for the built-in strict policy (disk: 1Gi)
		script   string
		reason   event.EndReason
		resource string // of the limit event
		ownFS    bool
	}{
		{"fallocate 1.5GiB under strict", "", "fallocate -l 1536M big; echo allocated; sleep 60", event.EndDiskLimit, "disk", true},
		{"fallocate past the budget and exit", "  resources: {disk: 64Mi}\n", "fallocate -l 256M big", event.EndDiskLimit, "disk", false},
		// Allocated in an unlinked file: no walk of the workspace would find it.
		{"fallocate unlinked", "  resources: {disk: 64Mi}\n", "python3 -c 'import os, time\nfd = os.open(\".\", os.O_TMPFILE | os.O_WRONLY, 0o600)\nos.posix_fallocate(fd, 0, 256 << 20)\ntime.sleep(60)'", event.EndDiskLimit, "disk", false},
		{"fallocate kept size", "  resources: {disk: 64Mi}\n", "touch big && fallocate -n -l 256M big; sleep 60", event.EndDiskLimit, "disk", false},
		{"inode flood", "  resources: {inodes: 2000}\n",
			"mkdir d && python3 -c 'import os\nfor i in range(20000): open(\"d/f%d\" % i, \"w\").close()'; sleep 60", event.EndDiskLimit, "inodes", false},
		{"within budget", "  resources: {disk: 1Gi}\n", "head -c 8M /dev/zero > small", event.EndExit, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state, ws := t.TempDir(), bermbin.Workspace(t)
			if tc.ownFS {
				ownFileSystem(t, ws)
			}
			id := "disk-" + strings.ReplaceAll(tc.name, " ", "-")
			args := []string{"--call-id", id, "--workspace", ws, "--timeout", "30s"}
			if tc.policy != "" {
				args = append(args, "--policy", writePolicy(t, tc.policy))
			}
			r := run(t, state, append(args, "--", "sh", "-c", tc.script)...)
			tl := bermbin.Timeline(t, state, id)
			rec := tl.Call.Record
			if rec == nil || rec.EndReason != tc.reason {
				t.Fatalf("end reason %+v, want %s\nexit %d, stderr: %s", rec, tc.reason, r.Exit, r.Stderr)
			}
			lims := limitEvents(tl)
			if tc.resource == "" {
				if len(lims) != 0 || r.Exit != 0 {
					t.Fatalf("a call within its budget: exit %d, limit events %+v", r.Exit, lims)
				}
				return
			}
			if len(lims) != 1 || lims[0].Resource != tc.resource {
				t.Fatalf("limit events %+v, want one for %s", lims, tc.resource)
			}
			if !strings.Contains(r.Stderr, string(event.EndDiskLimit)) {
				t.Errorf("berm run did not print the end reason: %s", r.Stderr)
			}
		})
	}
}

// The private /tmp is capped in inodes as well as bytes: the tool's creations fail past the
// cap, and the call ends as tmp_limit.
func TestTmpInodeCap(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	pol := writePolicy(t, "  resources: {tmpInodes: 100}\n")
	script := `i=0; while [ $i -lt 1000 ]; do touch /tmp/f$i 2>/dev/null || { echo "full at $i"; break; }; i=$((i+1)); done; [ $i -lt 1000 ] || echo "all 1000 made"; sleep 60`
	r := run(t, state, "--call-id", "tmp-inodes", "--workspace", ws, "--timeout", "30s", "--policy", pol, "--", "sh", "-c", script)
	// The watcher may end the call (the cap reached) before the shell prints where it stopped.
	if strings.Contains(r.Stdout, "all 1000 made") || r.Stdout != "" && !strings.HasPrefix(r.Stdout, "full at ") {
		t.Fatalf("every file of 1000 was made in a /tmp of 100 inodes: %q, stderr %s", r.Stdout, r.Stderr)
	}
	tl := bermbin.Timeline(t, state, "tmp-inodes")
	if tl.Call.Record == nil || tl.Call.Record.EndReason != event.EndTmpLimit {
		t.Fatalf("end reason %+v, want tmp_limit", tl.Call.Record)
	}
	if lims := limitEvents(tl); len(lims) != 1 || lims[0].Resource != "tmp_inodes" || lims[0].Limit != 100 {
		t.Fatalf("limit events %+v, want tmp_inodes 100", lims)
	}
}

type fileState struct {
	mode uint32
	size int64
	mt   unix.Timespec
}

func lstat(t *testing.T, p string) (fileState, bool) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if err == unix.ENOENT {
			return fileState{}, false
		}
		t.Fatal(err)
	}
	return fileState{st.Mode, st.Size, st.Mtim}, true
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// Nothing a call does eats the blocks its workspace's file system reserves. This host's root
// file system reserves them for uid 65534 (resuid=65534,resgid=65534), the uid a tool had
// when the workspace's owner was root or nobody: a small ext4 mounted the same way holds the
// workspace here, and the tool fills it. A tool running as the reserve's uid would take the
// reserve too; one with a uid of its own (issue 11, item 1) stops where every unprivileged
// writer stops. The disk budget cannot close this alone: it measures after the fact.
func TestCallCannotUseReservedBlocks(t *testing.T) {
	bermbin.RequireRoot(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	mustRun(t, "truncate", "-s", "64M", img)
	mustRun(t, "mkfs.ext4", "-q", "-F", "-m", "25", img)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "mount", "-o", "loop,resuid=65534,resgid=65534", img, mnt)
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	ws := filepath.Join(mnt, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var before, after unix.Statfs_t
	if err := unix.Statfs(mnt, &before); err != nil {
		t.Fatal(err)
	}
	reserved := before.Bfree - before.Bavail
	if reserved*uint64(before.Bsize) < 8<<20 {
		t.Fatalf("the test file system reserves only %d blocks", reserved)
	}
	r := run(t, t.TempDir(), "--call-id", "reserve", "--workspace", ws, "--",
		"sh", "-c", "id -u; fallocate -l 60M big; cat /dev/zero > fill; sync")
	mustRun(t, "sync", "-f", mnt)
	if err := unix.Statfs(mnt, &after); err != nil {
		t.Fatal(err)
	}
	if after.Bfree < reserved {
		// Until each call has a uid of its own, a tool running as 65534 fails here.
		t.Fatalf("the call (uid %s inside) used %d of the %d reserved blocks\nstderr: %s",
			strings.TrimSpace(r.Stdout), reserved-after.Bfree, reserved, r.Stderr)
	}
}

// ownFileSystem mounts a file system of its own at dir (ext4 in a 2 GiB sparse image, looped;
// owned by the sandbox's default user): what a call allocates there is counted on it alone, and
// an allocation (unwritten extents) barely grows the image on the host's file system. Not a
// tmpfs: its pages would be charged to the call's memory cap.
func ownFileSystem(t *testing.T, dir string) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	mustRun(t, "truncate", "-s", "2G", img)
	mustRun(t, "mkfs.ext4", "-q", "-F", img)
	mustRun(t, "mount", "-o", "loop", img, dir)
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}
