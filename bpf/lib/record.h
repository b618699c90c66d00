/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * Variable-size records and kernel paths. A record whose strings can be long (paths up to
 * PATH_MAX, argv) is assembled in a per-CPU scratch buffer and copied into the ring with its
 * used size only, so the ring and the reader pay per byte used, not per byte possible. Paths
 * of kernel objects (the file behind an fd, a directory) are built by walking the dentries up
 * to the task's root, crossing mount points, as d_path does.
 */
#ifndef BERM_RECORD_H
#define BERM_RECORD_H

#include "maps.h"

#define BERM_REC_SIZE 32768 /* > the largest fixed part + 4 * BERM_PATH_MAX (a syscall_path's strings) */
#define WALK_BUF 8192       /* paths are built back to front in its upper half */
#define WALK_STEPS 4096     /* dentries walked before a path is declared cut */

struct berm_rec {
	__u8 b[BERM_REC_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct berm_rec);
} berm_rec_scratch SEC(".maps");

struct berm_walkbuf {
	char b[WALK_BUF + 256];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct berm_walkbuf);
} berm_walk_scratch SEC(".maps");

static __always_inline struct berm_rec *berm_rec_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&berm_rec_scratch, &zero);
}

/*
 * Copy a record assembled in scratch into the ring, waking the reader as berm_submit does;
 * admitted, counted in the call's share and dropped by class as berm_reserve does.
 */
static __always_inline void berm_output(struct berm_call_cfg *cfg, void *data, __u64 size, int vital)
{
	__u32 slot = cfg->slot;
	__u64 *in = bpf_map_lookup_elem(&berm_ring_in, &slot);
	if (!berm_admit(slot, in, vital)) {
		berm_count_drop(slot, vital);
		return;
	}
	__u64 flags = BPF_RB_NO_WAKEUP;
	__u64 avail = bpf_ringbuf_query(&berm_events, BPF_RB_AVAIL_DATA);
	__u64 rec = (size + 8 + 7) & ~7ULL;
	if (avail < wakeup_bytes && avail + rec >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&berm_events, data, size, flags))
		berm_count_drop(slot, vital);
	else if (in)
		__sync_fetch_and_add(in, size);
}

/* The struct mount around a vfsmount (container_of, with the offset relocated by CO-RE). */
static __always_inline struct mount *berm_real_mount(struct vfsmount *mnt)
{
	return (struct mount *)((void *)mnt - bpf_core_field_offset(struct mount, mnt));
}

struct berm_walk {
	struct vfsmount *mnt;
	struct dentry *d;
	struct vfsmount *root_mnt;
	struct dentry *root_d;
	__u32 pos;  /* start of the path in the walk buffer */
	__u32 full; /* length of the whole path, written or not */
	__u32 done; /* reached the root */
	__u32 cut;  /* the path no longer fits: names are counted, not written */
};

/*
 * One dentry up per bpf_loop() step (callbacks are verified once, not per iteration). At the
 * root of a mount, on to its mount point in the parent mount; the walk ends at the task's
 * root, or at the top of its mount tree.
 */
static long berm_walk_step(__u64 i, void *ctx)
{
	struct berm_walk *w = ctx;
	struct vfsmount *mnt = w->mnt;
	struct dentry *d = w->d;
	if (d == w->root_d && mnt == w->root_mnt) {
		w->done = 1;
		return 1;
	}
	if (d == BPF_CORE_READ(mnt, mnt_root)) {
		struct mount *m = berm_real_mount(mnt);
		struct mount *parent = BPF_CORE_READ(m, mnt_parent);
		if (parent == m) {
			w->done = 1;
			return 1;
		}
		w->d = BPF_CORE_READ(m, mnt_mountpoint);
		w->mnt = (struct vfsmount *)((void *)parent + bpf_core_field_offset(struct mount, mnt));
		return 0;
	}
	struct dentry *up = BPF_CORE_READ(d, d_parent);
	if (up == d) {
		w->done = 1;
		return 1;
	}
	__u32 len = BPF_CORE_READ(d, d_name.len) & 255;
	w->full += len + 1;
	if (!w->cut && w->full <= BERM_PATH_MAX - 1) {
		__u32 zero = 0;
		struct berm_walkbuf *b = bpf_map_lookup_elem(&berm_walk_scratch, &zero);
		if (!b)
			return 1;
		__u32 pos = w->pos - len - 1;
		bpf_probe_read_kernel(&b->b[(pos + 1) & (WALK_BUF - 1)], len, BPF_CORE_READ(d, d_name.name));
		b->b[pos & (WALK_BUF - 1)] = '/';
		w->pos = pos;
	} else {
		w->cut = 1;
	}
	w->d = up;
	return 0;
}

/*
 * The path of (mnt, d) as task sees it, into dst (BERM_PATH_MAX bytes of room); returns the
 * bytes written and the whole path's length in *full (BERM_LEN_UNKNOWN: deeper than the walk).
 */
static __always_inline __u32 berm_walk_path_max(char *dst, struct vfsmount *mnt, struct dentry *d,
						struct task_struct *task, __u32 *full, __u32 max);

static __always_inline __u32 berm_walk_path(char *dst, struct vfsmount *mnt, struct dentry *d,
					    struct task_struct *task, __u32 *full)
{
	return berm_walk_path_max(dst, mnt, d, task, full, BERM_PATH_MAX);
}

/* berm_walk_path writing at most max - 1 bytes (max a power of two <= BERM_PATH_MAX); *full
 * still says the whole length, so a cut is marked. */
static __always_inline __u32 berm_walk_path_max(char *dst, struct vfsmount *mnt, struct dentry *d,
						struct task_struct *task, __u32 *full, __u32 max)
{
	__u32 zero = 0;
	*full = 0;
	struct berm_walkbuf *b = bpf_map_lookup_elem(&berm_walk_scratch, &zero);
	if (!b || !mnt || !d)
		return 0;
	struct berm_walk w = {
		.mnt = mnt,
		.d = d,
		.root_mnt = BPF_CORE_READ(task, fs, root.mnt),
		.root_d = BPF_CORE_READ(task, fs, root.dentry),
		.pos = WALK_BUF,
	};
	bpf_loop(WALK_STEPS, berm_walk_step, &w, 0);
	__u32 pos = w.pos;
	if (pos == WALK_BUF) { /* the root itself */
		pos -= 1;
		b->b[pos & (WALK_BUF - 1)] = '/';
		w.full = 1;
	}
	__u32 len = (WALK_BUF - pos) & (BERM_PATH_MAX - 1);
	if (len > max - 1)
		len = max - 1;
	len &= BERM_PATH_MAX - 1;
	*full = w.done ? w.full : BERM_LEN_UNKNOWN;
	if (bpf_probe_read_kernel(dst, len, &b->b[pos & (WALK_BUF - 1)]) < 0)
		return 0;
	return len;
}

/* The file behind task's fd, or NULL. */
static __always_inline struct file *berm_fd_file(struct task_struct *task, long fd)
{
	if (fd < 0)
		return 0;
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/* The path of the file behind fd (see berm_walk_path); 0 bytes when there is none. */
static __always_inline __u32 berm_fd_path(char *dst, struct task_struct *task, long fd, __u32 *full)
{
	struct file *f = berm_fd_file(task, fd);
	*full = 0;
	if (!f)
		return 0;
	return berm_walk_path(dst, BPF_CORE_READ(f, f_path.mnt), BPF_CORE_READ(f, f_path.dentry), task, full);
}

#endif /* BERM_RECORD_H */
