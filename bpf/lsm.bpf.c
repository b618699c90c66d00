// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * BPF LSM enforcement of a call's filesystem policy: the same grants as its Landlock ruleset
 * (read, write, exec, remove per tree), decided in the kernel's security hooks and reported
 * as denials, so a refusal says which path and which rule, and audit mode can report what it
 * would refuse without refusing it.
 *
 * Policy: berm_lsm_rules maps (call's cgroup id, inode) to rights. An object is judged by the
 * nearest inode on its way up to the root (crossing mount points) that has a rule; the agent
 * already unites each rule with its ancestors' rights, as Landlock does. No rule within
 * BERM_LSM_DEPTH levels: denied. Only cgroups in berm_calls are judged.
 *
 * The kernel's view of the object: these hooks run inside the syscall, after the kernel read
 * the path from the tool's memory and looked it up. Each records the object it was given (its
 * path walked up from the dentry, its device and inode) into the task's capture of the syscall
 * it serves (struct pending, lib/maps.h), and the syscall's exit puts it in the record beside
 * the path read from the tool's memory (syscalls.bpf.c). A thread rewriting the path buffer
 * can make the tool's memory say anything; the hook's dentry is what was unlinked, renamed,
 * made or truncated. Recorded whatever the verdict, for every traced call, policy or not.
 *
 * License: dual GPL-2.0-only / BSD-2-Clause. BPF LSM programs and bpf_d_path need a
 * GPL-compatible license, hence the "Dual BSD/GPL" below.
 */
#include "include/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lib/record.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define EPERM 1
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define __FMODE_EXEC 0x20 /* in f_flags: the file is opened by exec (open_exec) */
#define RENAME_EXCHANGE 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_LSM_MAX_RULES);
	__type(key, struct berm_lsm_key);
	__type(value, struct berm_lsm_rule);
} berm_lsm_rules SEC(".maps");

/* Room to assemble a path from its dentry names back to front (see build_path). */
#define SCRATCH_LEN 512
struct scratch {
	char buf[SCRATCH_LEN + 256];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} berm_lsm_scratch SEC(".maps");

/* The struct mount around a vfsmount (container_of, with the offset relocated by CO-RE). */
static __always_inline struct mount *real_mount(struct vfsmount *mnt)
{
	return (struct mount *)((void *)mnt - bpf_core_field_offset(struct mount, mnt));
}

/* A walk up the tree from (mnt, d), one dentry per bpf_loop() step. */
struct walk {
	struct vfsmount *mnt;
	struct dentry *d;
	__u64 cgid;
	struct berm_lsm_rule rule; /* find_rule: what it found */
	__u32 pos;                 /* build_path: start of the path in the scratch buffer */
	__u32 pad;
};

/*
 * One step up: at the root of a mount, on to its mount point in the parent mount (a grant on
 * a directory covers what is mounted beneath it, as for Landlock). Returns 0 at the root of
 * the namespace (or of a detached tree).
 */
static __always_inline int step_up(struct walk *w, int *crossed)
{
	/* Locals, not w->...: inside BPF_CORE_READ the walk itself would become a CO-RE
	 * relocation against a type the kernel does not have. */
	struct vfsmount *mnt = w->mnt;
	struct dentry *d = w->d;

	*crossed = 0;
	if (d == BPF_CORE_READ(mnt, mnt_root)) {
		struct mount *m = real_mount(mnt);
		struct mount *parent = BPF_CORE_READ(m, mnt_parent);
		if (parent == m)
			return 0;
		w->d = BPF_CORE_READ(m, mnt_mountpoint);
		w->mnt = (struct vfsmount *)((void *)parent + bpf_core_field_offset(struct mount, mnt));
		*crossed = 1;
		return 1;
	}
	struct dentry *up = BPF_CORE_READ(d, d_parent);
	if (up == d)
		return 0;
	w->d = up;
	return 1;
}

/*
 * bpf_loop() callbacks are verified once, not once per iteration: a walk of BERM_LSM_DEPTH
 * inlined steps with a mount crossing in each exceeds the verifier's budget.
 */
static long find_step(__u64 i, void *ctx)
{
	struct walk *w = ctx;
	struct dentry *d = w->d;
	struct inode *inode = BPF_CORE_READ(d, d_inode);
	if (inode) {
		struct berm_lsm_key key = {
			.cgroup_id = w->cgid,
			.ino = BPF_CORE_READ(inode, i_ino),
			.dev = BPF_CORE_READ(inode, i_sb, s_dev),
		};
		struct berm_lsm_rule *r = bpf_map_lookup_elem(&berm_lsm_rules, &key);
		if (r) {
			w->rule = *r;
			return 1;
		}
	}
	int crossed;
	return step_up(w, &crossed) ? 0 : 1;
}

/* The rule that decides about (mnt, d): the first inode with a rule on the way up; none: 0. */
static __always_inline struct berm_lsm_rule find_rule(__u64 cgid, struct vfsmount *mnt, struct dentry *d)
{
	struct walk w = {.mnt = mnt, .d = d, .cgid = cgid};
	bpf_loop(BERM_LSM_DEPTH, find_step, &w, 0);
	return w.rule;
}

static long path_step(__u64 i, void *ctx)
{
	struct walk *w = ctx;
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&berm_lsm_scratch, &zero);
	if (!s)
		return 1;
	struct dentry *d = w->d;
	int crossed;
	if (!step_up(w, &crossed))
		return 1;
	if (crossed) /* a mount root has no name of its own */
		return 0;
	__u32 len = BPF_CORE_READ(d, d_name.len);
	__u32 pos = w->pos;
	if (len > 255 || len + 1 > pos)
		return 1; /* keep the components that fit */
	pos -= len;
	bpf_probe_read_kernel(&s->buf[pos & (SCRATCH_LEN - 1)], len & 255, BPF_CORE_READ(d, d_name.name));
	pos -= 1;
	s->buf[pos & (SCRATCH_LEN - 1)] = '/';
	w->pos = pos;
	return 0;
}

/*
 * The path of (mnt, d) from its names, for hooks where bpf_d_path is not allowed (the path_*
 * hooks are not on the kernel's list for it). Names are written back to front into scratch;
 * a path longer than the buffer keeps its last components.
 */
static __always_inline void build_path(struct vfsmount *mnt, struct dentry *d, char *out)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&berm_lsm_scratch, &zero);
	if (!s) {
		out[0] = 0;
		return;
	}
	s->buf[SCRATCH_LEN - 1] = 0;
	struct walk w = {.mnt = mnt, .d = d, .pos = SCRATCH_LEN - 1};
	bpf_loop(BERM_LSM_DEPTH, path_step, &w, 0);
	__u32 pos = w.pos;
	if (pos == SCRATCH_LEN - 1) {
		pos -= 1;
		s->buf[pos & (SCRATCH_LEN - 1)] = '/';
	}
	bpf_probe_read_kernel_str(out, BERM_PATH_LEN, &s->buf[pos & (SCRATCH_LEN - 1)]);
}

/* How judge() names the object in a denial: bpf_d_path(fpath), or the names of (mnt, d). */
struct object {
	struct vfsmount *mnt;
	struct dentry *d;
};

/*
 * Decide whether the call may use `need` rights on the tree at (mnt, d), report a refusal
 * (or, in audit mode, a would-be refusal) and return the hook's verdict.
 */
static __always_inline int judge(struct vfsmount *mnt, struct dentry *d, __u32 need, struct path *fpath,
				 struct object *obj)
{
	if (!need)
		return 0;
	__u64 cgid = bpf_get_current_cgroup_id();
	struct berm_call_cfg *cfg = berm_call_of(cgid);
	if (!cfg)
		return 0;

	struct berm_lsm_rule r = find_rule(cgid, mnt, d);
	if ((r.rights & need) == need)
		return 0;

	int audit = cfg->flags & BERM_CALL_AUDIT;
	struct berm_lsm_deny *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_LSM_DENY, 0, 0));
	if (e) {
		berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_LSM_DENY, sizeof(*e), (struct task_struct *)bpf_get_current_task());
		e->rule = r.rule;
		e->audit = audit ? 1 : 0;
		if (fpath) {
			if (bpf_d_path(fpath, e->path, sizeof(e->path)) < 0)
				e->path[0] = 0;
		} else {
			build_path(obj->mnt, obj->d, e->path);
		}
		berm_submit(e, sizeof(*e));
	}
	return audit ? 0 : -EPERM;
}

/* x86-64 numbers of the syscalls whose objects the hooks below record (see serves) */
#define NR_truncate 76
#define NR_rename 82
#define NR_mkdir 83
#define NR_rmdir 84
#define NR_unlink 87
#define NR_mknod 133
#define NR_mkdirat 258
#define NR_mknodat 259
#define NR_unlinkat 263
#define NR_renameat 264
#define NR_renameat2 316
#define NR_execve 59
#define NR_execveat 322

/* Which hook records the objects of which syscall: a hook also runs inside other syscalls
 * (path_mknod in an open with O_CREAT, path_truncate in one with O_TRUNC), whose objects the
 * open's fd already names. */
enum hook {
	HOOK_UNLINK,
	HOOK_RMDIR,
	HOOK_RENAME,
	HOOK_MKDIR,
	HOOK_MKNOD,
	HOOK_TRUNCATE,
	HOOK_EXEC,
};

static __always_inline int serves(enum hook h, __u32 nr)
{
	switch (h) {
	case HOOK_UNLINK:
		return nr == NR_unlink || nr == NR_unlinkat;
	case HOOK_RMDIR:
		return nr == NR_rmdir || nr == NR_unlinkat;
	case HOOK_RENAME:
		return nr == NR_rename || nr == NR_renameat || nr == NR_renameat2;
	case HOOK_MKDIR:
		return nr == NR_mkdir || nr == NR_mkdirat;
	case HOOK_MKNOD:
		return nr == NR_mknod || nr == NR_mknodat;
	case HOOK_TRUNCATE:
		return nr == NR_truncate;
	case HOOK_EXEC:
		return nr == NR_execve || nr == NR_execveat;
	}
	return 0;
}

/* The current task's capture of the syscall it is in, when hook h records that syscall's
 * objects: only tasks of traced calls have one (the entry made it). */
static __always_inline struct pending *capture_of(enum hook h)
{
	struct pending *p = bpf_task_storage_get(&berm_pending, bpf_get_current_task_btf(), 0, 0);
	if (!p || !serves(h, p->nr))
		return 0;
	return p;
}

/*
 * Record (mnt, d) as the kernel's view of the syscall's first (second: 0 / 1) path: the path
 * walked up from the dentry to the task's root (lib/record.h, as the exec record's), the
 * device and inode. A negative dentry (an entry about to be made) has no inode: its device is
 * the mount's.
 */
static __always_inline void see(struct pending *p, int second, struct vfsmount *mnt, struct dentry *d)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct berm_kobj *k = second ? &p->k2 : &p->k1;
	__u32 full = 0;
	__u32 len = berm_walk_path(second ? p->kp2 : p->kp1, mnt, d, task, &full);
	struct inode *inode = BPF_CORE_READ(d, d_inode);
	k->path.len = len;
	k->path.full = full;
	k->ino = inode ? BPF_CORE_READ(inode, i_ino) : 0;
	k->dev = inode ? BPF_CORE_READ(inode, i_sb, s_dev) : BPF_CORE_READ(mnt, mnt_sb, s_dev);
	k->seen = len > 0;
}

/*
 * file_open runs for every open that yields a file (not O_PATH), after the path walk, with
 * the final inode and the access mode: reads, writes and the opens exec makes (open_exec,
 * also for the ELF interpreter and script interpreters) are all decided here. It records no
 * kernel view: a successful open's fd names its file at the exit, a refused one its denial.
 */
SEC("lsm/file_open")
int BPF_PROG(berm_file_open, struct file *file)
{
	__u32 mode = BPF_CORE_READ(file, f_mode);
	__u32 need = 0;
	if (mode & FMODE_READ)
		need |= BERM_LSM_READ;
	if (mode & FMODE_WRITE)
		need |= BERM_LSM_WRITE;
	if (BPF_CORE_READ(file, f_flags) & __FMODE_EXEC)
		need |= BERM_LSM_EXEC;
	struct object obj = {};
	return judge(BPF_CORE_READ(file, f_path.mnt), BPF_CORE_READ(file, f_path.dentry), need,
		     (struct path *)&file->f_path, &obj);
}

/*
 * bprm_check_security sees the file that will actually run, once per binfmt stage (a script,
 * then its interpreter): exec stays enforced whatever route opened the file, e.g. an
 * execveat() of an fd opened before the policy applied. The first stage's file is recorded as
 * the kernel's view of execve's path (reported when the exec fails).
 */
SEC("lsm/bprm_check_security")
int BPF_PROG(berm_bprm_check, struct linux_binprm *bprm)
{
	struct file *file = bprm->file; /* a BTF pointer, as bpf_d_path needs */
	struct object obj = {};
	/* The first stage's file is the one the tool named (then a script's interpreter). */
	struct pending *p = capture_of(HOOK_EXEC);
	if (p && !p->k1.seen)
		see(p, 0, BPF_CORE_READ(file, f_path.mnt), BPF_CORE_READ(file, f_path.dentry));
	return judge(BPF_CORE_READ(file, f_path.mnt), BPF_CORE_READ(file, f_path.dentry), BERM_LSM_EXEC,
		     (struct path *)&file->f_path, &obj);
}

/*
 * Deletion is a right on the directory, as for Landlock (REMOVE_FILE/REMOVE_DIR): a file one
 * may read is not a file one may delete. The path_* hooks give the directory with its mount,
 * which the inode_* hooks lack (needed to walk up across mount points), and the entry: the
 * kernel's view of what unlink, unlinkat and rmdir remove, whatever the tool's buffer says.
 */
SEC("lsm/path_unlink")
int BPF_PROG(berm_path_unlink, const struct path *dir, struct dentry *dentry)
{
	struct vfsmount *mnt = BPF_CORE_READ(dir, mnt);
	struct object obj = {.mnt = mnt, .d = dentry};
	struct pending *p = capture_of(HOOK_UNLINK);
	if (p)
		see(p, 0, mnt, dentry);
	return judge(mnt, BPF_CORE_READ(dir, dentry), BERM_LSM_REMOVE, NULL, &obj);
}

SEC("lsm/path_rmdir")
int BPF_PROG(berm_path_rmdir, const struct path *dir, struct dentry *dentry)
{
	struct vfsmount *mnt = BPF_CORE_READ(dir, mnt);
	struct object obj = {.mnt = mnt, .d = dentry};
	struct pending *p = capture_of(HOOK_RMDIR);
	if (p)
		see(p, 0, mnt, dentry);
	return judge(mnt, BPF_CORE_READ(dir, dentry), BERM_LSM_REMOVE, NULL, &obj);
}

/*
 * A rename removes an entry from one directory and makes one in another: REMOVE on the
 * source directory, WRITE on the target, REMOVE there too when it replaces an entry, and both
 * on both sides when it exchanges two. Without it, a file could leave a protected tree by moving.
 * Both entries, with their mounts, are the kernel's view of the rename's two paths.
 */
SEC("lsm/path_rename")
int BPF_PROG(berm_path_rename, const struct path *old_dir, struct dentry *old_dentry,
	     const struct path *new_dir, struct dentry *new_dentry, unsigned int flags)
{
	__u32 need = BERM_LSM_REMOVE;
	if (flags & RENAME_EXCHANGE)
		need |= BERM_LSM_WRITE;
	struct vfsmount *mnt = BPF_CORE_READ(old_dir, mnt);
	struct object obj = {.mnt = mnt, .d = old_dentry};
	/* Both objects, before either is judged: a refused rename is recorded as what it was. */
	struct pending *p = capture_of(HOOK_RENAME);
	if (p) {
		see(p, 0, mnt, old_dentry);
		see(p, 1, BPF_CORE_READ(new_dir, mnt), new_dentry);
	}
	int ret = judge(mnt, BPF_CORE_READ(old_dir, dentry), need, NULL, &obj);
	if (ret)
		return ret;
	need = BERM_LSM_WRITE;
	if (BPF_CORE_READ(new_dentry, d_inode))
		need |= BERM_LSM_REMOVE;
	mnt = BPF_CORE_READ(new_dir, mnt);
	struct object nobj = {.mnt = mnt, .d = new_dentry};
	return judge(mnt, BPF_CORE_READ(new_dir, dentry), need, NULL, &nobj);
}

/*
 * Creating an entry (open with O_CREAT, mknod, mkdir) needs WRITE on the directory, checked
 * before the entry exists: file_open only sees the file after it was made. The entry (no inode
 * yet) is the kernel's view of mknod's and mkdir's path; an open's is its fd's.
 */
SEC("lsm/path_mknod")
int BPF_PROG(berm_path_mknod, const struct path *dir, struct dentry *dentry, umode_t mode, unsigned int dev)
{
	struct vfsmount *mnt = BPF_CORE_READ(dir, mnt);
	struct object obj = {.mnt = mnt, .d = dentry};
	struct pending *p = capture_of(HOOK_MKNOD);
	if (p)
		see(p, 0, mnt, dentry);
	return judge(mnt, BPF_CORE_READ(dir, dentry), BERM_LSM_WRITE, NULL, &obj);
}

SEC("lsm/path_mkdir")
int BPF_PROG(berm_path_mkdir, const struct path *dir, struct dentry *dentry, umode_t mode)
{
	struct vfsmount *mnt = BPF_CORE_READ(dir, mnt);
	struct object obj = {.mnt = mnt, .d = dentry};
	struct pending *p = capture_of(HOOK_MKDIR);
	if (p)
		see(p, 0, mnt, dentry);
	return judge(mnt, BPF_CORE_READ(dir, dentry), BERM_LSM_WRITE, NULL, &obj);
}

/* truncate(2) changes a file's content without opening it: the kernel's view of its path is
 * the file the path resolved to (through a final symlink too). */
SEC("lsm/path_truncate")
int BPF_PROG(berm_path_truncate, const struct path *path)
{
	struct vfsmount *mnt = BPF_CORE_READ(path, mnt);
	struct dentry *d = BPF_CORE_READ(path, dentry);
	struct object obj = {.mnt = mnt, .d = d};
	struct pending *p = capture_of(HOOK_TRUNCATE);
	if (p)
		see(p, 0, mnt, d);
	return judge(mnt, d, BERM_LSM_WRITE, NULL, &obj);
}
