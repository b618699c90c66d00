// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * Syscalls of sandboxed calls: per-call counters aggregated in the kernel, and individual
 * events for file opens, connects, destructive metadata changes and a configurable set of
 * syscall numbers.
 *
 * What an event names is what the kernel acted on, not what user memory says afterwards:
 * arguments in user memory (paths, socket addresses) are read at syscall entry, before the
 * call can block while another thread rewrites them, and kept per task until the exit; the
 * file an open yielded, and the file behind an fd, are named from the kernel's own objects.
 *
 * License: dual GPL-2.0-only / BSD-2-Clause ("Dual BSD/GPL" for the kernel's helper checks).
 */
#include "include/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "lib/record.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* x86-64 syscall numbers used below (this object is built for amd64 only). */
#define NR_open 2
#define NR_connect 42
#define NR_creat 85
#define NR_openat 257
#define NR_openat2 437
#define NR_NONE 0xffffffff /* a consumed capture */

#define AT_FDCWD -100
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10

/*
 * The early-out for every syscall of every task on the node while these programs are attached
 * (the agent attaches them only while a call is registered): per bucket of cgroup ids (the id's
 * low bits), how many registered calls fall in it, written by the agent alone
 * (tracer.Register/Unregister). A task whose bucket is empty, which is every task outside the
 * calls but for the rare collision, leaves after its cgroup id read from its task and one array
 * load, without the hash lookup of berm_calls; a collision costs that lookup, nothing else.
 */
#define BERM_CALL_FILTER 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_CALL_FILTER);
	__type(key, __u32);
	__type(value, __u32);
} berm_call_filter SEC(".maps");

/* The call of the current task's cgroup (its id in *cgid), or NULL, the cheap way first. */
static __always_inline struct berm_call_cfg *call_of_current(__u64 *cgid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	/* what bpf_get_current_cgroup_id() returns, read without the helper's call */
	__u64 id = task->cgroups->dfl_cgrp->kn->id;
	__u32 k = id & (BERM_CALL_FILTER - 1);
	__u32 *n = bpf_map_lookup_elem(&berm_call_filter, &k);
	if (!n || !*n)
		return 0;
	*cgid = id;
	return berm_call_of(id);
}

/* Per-call syscall counters, indexed by slot. Per-CPU: no atomics on the hot path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct berm_syscounts);
} berm_syscounts SEC(".maps");

/* Per call slot: the syscalls counted instead of reported (struct berm_aggmask, written by the
 * agent only) and their counts (struct berm_aggcounts). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct berm_aggmask);
} berm_aggmask SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct berm_aggcounts);
} berm_aggcounts SEC(".maps");


/* Which argument of a traced syscall is a path (-1: none). x86-64 numbers. */
static __always_inline int path_arg(long nr)
{
	switch (nr) {
	case 59:  /* execve (only failed ones are reported) */
	case 21:  /* access */
	case 76:  /* truncate */
	case 82:  /* rename */
	case 83:  /* mkdir */
	case 84:  /* rmdir */
	case 86:  /* link */
	case 87:  /* unlink */
	case 90:  /* chmod */
	case 92:  /* chown */
	case 94:  /* lchown */
	case 132: /* utime */
	case 133: /* mknod */
	case 235: /* utimes */
	case 155: /* pivot_root */
	case 161: /* chroot */
	case 166: /* umount2 */
	case 319: /* memfd_create: the name */
		return 0;
	case 165: /* mount: the target */
	case 258: /* mkdirat */
	case 259: /* mknodat */
	case 260: /* fchownat */
	case 261: /* futimesat (NULL: the fd itself, fd_arg) */
	case 263: /* unlinkat */
	case 264: /* renameat */
	case 265: /* linkat */
	case 268: /* fchmodat */
	case 269: /* faccessat */
	case 280: /* utimensat (NULL: the fd itself, fd_arg) */
	case 316: /* renameat2 */
	case 322: /* execveat */
	case 439: /* faccessat2 */
	case 452: /* fchmodat2 */
		return 1;
	case 88:  /* symlink: the link path, as for symlinkat */
		return 1;
	case 266: /* symlinkat: the link path */
		return 2;
	}
	return -1;
}

/* The second path: rename's and link's destination, mount's source, symlink's target. */
static __always_inline int path2_arg(long nr)
{
	switch (nr) {
	case 82:  /* rename */
	case 86:  /* link */
	case 155: /* pivot_root */
		return 1;
	case 264: /* renameat */
	case 265: /* linkat */
	case 316: /* renameat2 */
		return 3;
	case 165: /* mount: the source */
	case 88:  /* symlink: the target */
	case 266: /* symlinkat: the target */
		return 0;
	}
	return -1;
}

/* Syscalls that act on an fd's file: its path comes from the kernel (-1: none). */
static __always_inline int fd_arg(long nr, __u64 path_ptr)
{
	switch (nr) {
	case 77:  /* ftruncate */
	case 91:  /* fchmod */
	case 93:  /* fchown */
	case 285: /* fallocate */
		return 0;
	case 261: /* futimesat(fd, NULL, ...) */
	case 280: /* utimensat(fd, NULL, ...): futimens */
		return path_ptr ? -1 : 0;
	}
	return -1;
}

/*
 * The call's traced set; the agent adds the destructive metadata changes to every call's
 * (tracer.AlwaysTraced), so that the check stays one load on the hot path.
 */
static __always_inline int traced(struct berm_call_cfg *cfg, long nr)
{
	__u32 word = ((__u32)nr / 64) & (BERM_MAX_SYSCALLS / 64 - 1);
	return (cfg->sys_mask[word] & (1ULL << (nr % 64))) != 0;
}

/* A traced syscall that returned ret is reported, unless it is traced for its refusals only. */
static __always_inline int reported(struct berm_call_cfg *cfg, long nr, long ret)
{
	__u32 word = ((__u32)nr / 64) & (BERM_MAX_SYSCALLS / 64 - 1);
	return traced(cfg, nr) && (ret == -1 /* EPERM */ || !(cfg->refused_mask[word] & (1ULL << (nr % 64))));
}

static __always_inline __u64 arg_of(struct pt_regs *regs, int i)
{
	switch (i) {
	case 0:
		return regs->di;
	case 1:
		return regs->si;
	case 2:
		return regs->dx;
	case 3:
		return regs->r10;
	case 4:
		return regs->r8;
	}
	return regs->r9;
}

struct measure {
	const char *p;
	__u32 n;
};

/* Past the first BERM_PATH_MAX bytes, count the rest of a string (at most 64 KiB). */
static long measure_step(__u64 i, void *ctx)
{
	struct measure *m = ctx;
	__u32 zero = 0;
	struct berm_walkbuf *b = bpf_map_lookup_elem(&berm_walk_scratch, &zero);
	if (!b)
		return 1;
	long r = bpf_probe_read_user_str(b->b, BERM_PATH_MAX, m->p + m->n);
	if (r <= 0)
		return 1;
	m->n += r - 1;
	return r < BERM_PATH_MAX;
}

/* Read a string argument into dst (BERM_PATH_MAX bytes), its lengths into *s. */
static __always_inline void read_user_str(char *dst, const char *src, struct berm_str *s)
{
	s->len = 0;
	s->full = 0;
	if (!src)
		return;
	long r = bpf_probe_read_user_str(dst, BERM_PATH_MAX, src);
	if (r <= 0)
		return;
	s->len = (r - 1) & (BERM_PATH_MAX - 1);
	s->full = s->len;
	if (r == BERM_PATH_MAX) { /* filled: there may be more */
		struct measure m = {.p = src, .n = BERM_PATH_MAX - 1};
		bpf_loop(16, measure_step, &m, 0);
		s->full = m.n;
	}
}

static __always_inline struct pending *pending_of(struct task_struct *task, __u64 flags)
{
	return bpf_task_storage_get(&berm_pending, task, 0, flags);
}

/*
 * Capture the user-memory arguments of a syscall that will be reported, and name the file of
 * an fd-based one, before the call runs.
 */
static __noinline int capture(struct pt_regs *regs, long nr)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pending *p = pending_of(task, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!p)
		return 0;
	p->nr = nr;
	p->source = BERM_SRC_NONE;
	p->source2 = BERM_SRC_NONE;
	p->path.len = 0;
	p->path2.len = 0;
	p->uptr1 = 0;
	p->uptr2 = 0;
	p->k1.seen = 0; /* what a hook saw in an earlier syscall is not this one's object */
	p->k2.seen = 0;
	if (nr == NR_connect) {
		__u32 len = regs->dx;
		if (len > sizeof(p->addr))
			len = sizeof(p->addr);
		p->addrlen = regs->dx;
		__builtin_memset(p->addr, 0, sizeof(p->addr));
		if (bpf_probe_read_user(p->addr, len & (sizeof(p->addr) - 1), (void *)regs->si) == 0)
			p->source = BERM_SRC_USER;
		return 0;
	}
	const char *a;
	if (nr == NR_open || nr == NR_creat)
		a = (const char *)regs->di;
	else if (nr == NR_openat || nr == NR_openat2)
		a = (const char *)regs->si;
	else {
		int i = path_arg(nr), j = path2_arg(nr);
		int f = fd_arg(nr, regs->si);
		if (f == 0) {
			p->path.len = berm_fd_path(p->p1, task, regs->di, &p->path.full);
			p->source = BERM_SRC_KERNEL;
		} else if (i >= 0) {
			p->uptr1 = arg_of(regs, i);
			read_user_str(p->p1, (const char *)p->uptr1, &p->path);
			p->source = BERM_SRC_USER;
		}
		if (j >= 0) {
			p->uptr2 = arg_of(regs, j);
			read_user_str(p->p2, (const char *)p->uptr2, &p->path2);
			p->source2 = BERM_SRC_USER;
		}
		return 0;
	}
	read_user_str(p->p1, a, &p->path);
	p->source = BERM_SRC_USER;
	return 0;
}

/*
 * Counting happens at entry: exit_group and a successful execve never return to the caller,
 * so an exit-side counter would miss them. The sandbox check is the first thing done, so a
 * process outside every sandbox pays the filter's one array load (call_of_current); a syscall
 * of a call that is counted but not reported pays no more than the counter.
 */
SEC("tp_btf/sys_enter")
int BPF_PROG(berm_sys_enter, struct pt_regs *regs, long id)
{
	__u64 cgid;
	struct berm_call_cfg *cfg = call_of_current(&cgid);
	if (!cfg)
		return 0;
	if (id < 0 || id >= BERM_MAX_SYSCALLS)
		return 0;
	__u32 slot = cfg->slot;
	struct berm_syscounts *c = bpf_map_lookup_elem(&berm_syscounts, &slot);
	/* Counted as the tool's once it started, and never the init's (it only waits for it). */
	if (c && !(cfg->flags & BERM_CALL_SETUP) && (bpf_get_current_pid_tgid() >> 32) != cfg->init_tgid)
		c->n[id & (BERM_MAX_SYSCALLS - 1)] += 1;
	switch (id) {
	case NR_open:
	case NR_creat:
	case NR_openat:
	case NR_openat2:
		return capture(regs, id);
	case NR_connect: {
		/* what a hook saw in another syscall is not this connect's destination */
		__u64 tid = bpf_get_current_pid_tgid();
		bpf_map_delete_elem(&berm_connect_addr, &tid);
		return capture(regs, id);
	}
	}
	if (traced(cfg, id) && (path_arg(id) >= 0 || fd_arg(id, regs->si) >= 0))
		return capture(regs, id);
	return 0;
}

/* Copy a captured string into a record's tail at off; returns the new offset. */
static __always_inline __u32 put_str(struct berm_rec *r, __u32 off, const char *src, __u32 len)
{
	len &= BERM_PATH_MAX - 1;
	if (len)
		bpf_probe_read_kernel(&r->b[off & (BERM_REC_SIZE / 2 - 1)], len, src);
	return off + len;
}

/* The kernel's view of an object a BPF LSM hook saw in this syscall, into a record. */
static __always_inline __u32 put_kobj(struct berm_rec *r, __u32 off, struct berm_kobj *dst, struct berm_kobj *k,
				      const char *path)
{
	if (!k->seen) /* dst stays zero */
		return off;
	*dst = *k;
	dst->path.len &= BERM_PATH_MAX - 1;
	return put_str(r, off, path, dst->path.len);
}

static __noinline int emit_open(struct berm_call_cfg *cfg, __u64 cgid, struct pt_regs *regs, long nr, long ret)
{
	struct berm_rec *r = berm_rec_get();
	if (!r)
		return 0;
	struct berm_open *e = (void *)r->b;
	struct task_struct *task = bpf_get_current_task_btf();
	e->ret = ret;
	e->nr = nr;
	e->pad = 0;
	if (nr == NR_open || nr == NR_creat) {
		e->dirfd = AT_FDCWD;
		e->flags = nr == NR_creat ? 0x241 /* O_CREAT|O_WRONLY|O_TRUNC */ : regs->si;
		e->mode = nr == NR_creat ? regs->si : regs->dx;
	} else if (nr == NR_openat) {
		e->dirfd = regs->di;
		e->flags = regs->dx;
		e->mode = regs->r10;
	} else {
		struct open_how how = {};
		e->dirfd = regs->di;
		bpf_probe_read_user(&how, sizeof(how), (void *)regs->dx);
		e->flags = how.flags;
		e->mode = how.mode;
	}
	__u32 off = sizeof(*e);
	char *tail = (char *)r->b + sizeof(*e);
	e->base.len = 0;
	e->base.full = 0;
	e->path.len = 0;
	e->path.full = 0;
	e->source = BERM_SRC_NONE;
	if (ret >= 0) {
		__u32 full;
		__u32 len = berm_fd_path(tail, task, ret, &full);
		if (len) {
			e->path.len = len;
			e->path.full = full;
			e->source = BERM_SRC_KERNEL;
			off += len;
		}
	}
	if (e->source == BERM_SRC_KERNEL) {
		/* The entry's capture is not needed: consume it, so that a later open refused by
		 * seccomp (no entry) captures its own arguments instead of reading this one's. */
		struct pending *p = pending_of(task, 0);
		if (p && p->nr == nr)
			p->nr = NR_NONE;
	}
	if (e->source == BERM_SRC_NONE) {
		struct pending *p = pending_of(task, 0);
		if (!p || p->nr != nr) {
			/* no entry (refused by seccomp before the tracepoint): read what was refused */
			capture(regs, nr);
			p = pending_of(task, 0);
		}
		if (p && p->nr == nr && p->source == BERM_SRC_USER) {
			p->nr = NR_NONE; /* consumed: a later syscall never reads this one's arguments */
			e->path = p->path;
			e->source = BERM_SRC_USER;
			off = put_str(r, off, p->p1, p->path.len);
			/* relative: the directory the kernel resolved it against */
			if (p->path.len && p->p1[0] != '/') {
				struct vfsmount *mnt;
				struct dentry *d;
				if (e->dirfd == AT_FDCWD) {
					mnt = BPF_CORE_READ(task, fs, pwd.mnt);
					d = BPF_CORE_READ(task, fs, pwd.dentry);
				} else {
					struct file *f = berm_fd_file(task, e->dirfd);
					mnt = BPF_CORE_READ(f, f_path.mnt);
					d = BPF_CORE_READ(f, f_path.dentry);
				}
				__u32 full;
				__u32 len = berm_walk_path((char *)&r->b[off & (2 * BERM_PATH_MAX - 1)], mnt, d, task, &full);
				e->base.len = len;
				e->base.full = full;
				off += len;
			}
		}
	}
	off &= BERM_REC_SIZE - 1;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_OPEN, off, task);
	berm_output(cfg, r, off, berm_vital(BERM_OP_OPEN, ret, e->flags));
	return 0;
}

static __noinline int emit_connect(struct berm_call_cfg *cfg, __u64 cgid, long ret)
{
	struct berm_rec *r = berm_rec_get();
	if (!r)
		return 0;
	struct berm_connect *e = (void *)r->b;
	struct task_struct *task = bpf_get_current_task_btf();
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_CONNECT, sizeof(*e), task);
	e->ret = ret;
	e->port = 0;
	e->family = 0;
	e->addrlen = 0;
	e->unix_path[0] = 0;
	e->source = BERM_SRC_NONE;
	e->pad = 0;
	__builtin_memset(e->addr, 0, sizeof(e->addr));
	struct pending *p = pending_of(task, 0);
	/* This connect's entry ran (seccomp did not refuse it first): only then is what the hook
	 * left this connect's, the entry having cleared what an earlier syscall's hook left. A
	 * capture is consumed here, whatever it held. */
	int entered = p && p->nr == NR_connect;
	if (entered)
		p->nr = NR_NONE;
	__u64 tid = bpf_get_current_pid_tgid();
	struct berm_kaddr *k = bpf_map_lookup_elem(&berm_connect_addr, &tid);
	if (k && entered) {
		/* the cgroup connect hook ran: the kernel's copy of the destination */
		e->source = BERM_SRC_KERNEL;
		e->family = k->family;
		e->port = k->port;
		__builtin_memcpy(e->addr, k->addr, sizeof(e->addr));
		e->addrlen = p->addrlen;
	} else if (entered && p->source == BERM_SRC_USER) {
		e->source = BERM_SRC_USER;
		e->addrlen = p->addrlen;
		__u16 family = *(__u16 *)p->addr;
		e->family = family;
		if (family == AF_INET) {
			struct sockaddr_in *sin = (void *)p->addr;
			e->port = bpf_ntohs(sin->sin_port);
			__builtin_memcpy(e->addr, &sin->sin_addr, 4);
		} else if (family == AF_INET6) {
			struct sockaddr_in6 *sin6 = (void *)p->addr;
			e->port = bpf_ntohs(sin6->sin6_port);
			__builtin_memcpy(e->addr, &sin6->sin6_addr, 16);
		} else if (family == AF_UNIX) {
			/* sun_path may be unterminated: the copy is bounded by the field */
			__builtin_memcpy(e->unix_path, &p->addr[2], sizeof(e->unix_path));
			e->unix_path[sizeof(e->unix_path) - 1] = 0;
		}
	}
	if (k)
		bpf_map_delete_elem(&berm_connect_addr, &tid);
	berm_output(cfg, r, sizeof(*e), berm_vital(BERM_OP_CONNECT, ret, 0));
	return 0;
}

static __always_inline void fill_syscall(struct berm_syscall *e, struct pt_regs *regs, long nr, long ret)
{
	e->ret = ret;
	e->nr = nr;
	e->pad = 0;
	e->args[0] = regs->di;
	e->args[1] = regs->si;
	e->args[2] = regs->dx;
	e->args[3] = regs->r10;
	e->args[4] = regs->r8;
	e->args[5] = regs->r9;
}

/*
 * A call past its event budget whose agent asked for nr to be counted here rather than reported
 * (berm_aggmask): count it and say so. One array lookup per reported syscall; the counters are
 * shared by the call's CPUs, so atomic.
 */
static __always_inline int counted_only(struct berm_call_cfg *cfg, long nr, long ret)
{
	__u32 slot = cfg->slot;
	struct berm_aggmask *m = bpf_map_lookup_elem(&berm_aggmask, &slot);
	__u32 i = (__u32)nr & (BERM_MAX_SYSCALLS - 1);
	if (!m || !(m->w[i / 64] & (1ULL << (i % 64))))
		return 0;
	struct berm_aggcounts *c = bpf_map_lookup_elem(&berm_aggcounts, &slot);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->n[i], 1);
	if (ret < 0)
		__sync_fetch_and_add(&c->failed[i], 1);
	return 1;
}

struct same_ctx {
	__u32 len;
	__u32 second; /* comparing path2 */
	__u32 differ;
};

/* One 8-byte word of the string read again (walk scratch) against the entry's copy. */
static long same_step(__u64 i, void *ctx)
{
	struct same_ctx *c = ctx;
	__u32 zero = 0;
	struct berm_walkbuf *b = bpf_map_lookup_elem(&berm_walk_scratch, &zero);
	struct pending *p = pending_of(bpf_get_current_task_btf(), 0);
	if (!b || !p) {
		c->differ = 1;
		return 1;
	}
	__u32 off = ((__u32)i * 8) & (BERM_PATH_MAX - 8); /* bounded for the verifier */
	if ((__u32)i * 8 >= c->len || i >= BERM_PATH_MAX / 8)
		return 1;
	__u64 x = *(__u64 *)&b->b[off];
	__u64 y = c->second ? *(__u64 *)&p->p2[off] : *(__u64 *)&p->p1[off];
	__u32 left = c->len - off;
	if (left < 8) { /* past the string: bytes of earlier reads */
		__u64 mask = (1ULL << ((left & 7) * 8)) - 1;
		x &= mask;
		y &= mask;
	}
	if (x != y) {
		c->differ = 1;
		return 1;
	}
	return 0;
}

/*
 * Read a path argument again at the syscall's exit and say whether it differs from what its
 * entry read (len bytes in the task's pending capture): another thread rewrote it while the
 * kernel used it. Unreadable now (unmapped during the call) counts as changed.
 */
static __noinline int user_changed(__u64 uptr, __u32 len, __u32 second)
{
	__u32 zero = 0;
	struct berm_walkbuf *b = bpf_map_lookup_elem(&berm_walk_scratch, &zero);
	if (!b || !uptr)
		return 0;
	long r = bpf_probe_read_user_str(b->b, BERM_PATH_MAX, (const char *)uptr);
	if (r <= 0)
		return 1;
	if ((__u32)(r - 1) != len)
		return 1;
	struct same_ctx c = {.len = len, .second = second};
	bpf_loop(BERM_PATH_MAX / 8, same_step, &c, 0);
	return c.differ;
}

static __noinline int emit_syscall(struct berm_call_cfg *cfg, __u64 cgid, struct pt_regs *regs, long nr, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (path_arg(nr) < 0 && fd_arg(nr, regs->si) < 0) {
		if (ret != -1 /* EPERM: a refusal is always an event */ && counted_only(cfg, nr, ret))
			return 0;
		struct berm_syscall *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_SYSCALL, ret, 0));
		if (!e)
			return 0;
		berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_SYSCALL, sizeof(*e), task);
		fill_syscall(e, regs, nr, ret);
		berm_submit(e, sizeof(*e));
		return 0;
	}
	struct berm_rec *r = berm_rec_get();
	if (!r)
		return 0;
	struct berm_syscall_path *e = (void *)r->b;
	fill_syscall(&e->sc, regs, nr, ret);
	__u32 off = sizeof(*e);
	e->source = BERM_SRC_NONE;
	e->source2 = BERM_SRC_NONE;
	e->path.len = 0;
	e->path.full = 0;
	e->path2.len = 0;
	e->path2.full = 0;
	e->changed = 0;
	e->pad = 0;
	__builtin_memset(&e->kobj, 0, sizeof(e->kobj));
	__builtin_memset(&e->kobj2, 0, sizeof(e->kobj2));
	struct pending *p = pending_of(task, 0);
	if (!p || p->nr != nr) {
		/* The entry tracepoint did not run: seccomp refused the call before it. Nothing was
		 * done with the arguments, so reading them now is reading what was refused. */
		capture(regs, nr);
		p = pending_of(task, 0);
	}
	if (p && p->nr == nr) {
		p->nr = NR_NONE;
		/* What the entry read from user memory, read again now: a change is a race. */
		if (p->source == BERM_SRC_USER && p->path.len && user_changed(p->uptr1, p->path.len, 0))
			e->changed |= BERM_CHANGED_PATH;
		if (p->source2 == BERM_SRC_USER && p->path2.len && user_changed(p->uptr2, p->path2.len, 1))
			e->changed |= BERM_CHANGED_PATH2;
		e->source = p->source;
		e->source2 = p->source2;
		e->path = p->path;
		e->path2 = p->path2;
		off = put_str(r, off, p->p1, p->path.len);
		off = put_str(r, off, p->p2, p->path2.len);
		e->path.len &= BERM_PATH_MAX - 1;
		e->path2.len &= BERM_PATH_MAX - 1;
		/* What the BPF LSM hooks saw of the objects while the syscall ran (lsm.bpf.c) */
		off = put_kobj(r, off, &e->kobj, &p->k1, p->kp1);
		off = put_kobj(r, off, &e->kobj2, &p->k2, p->kp2);
	}
	off &= BERM_REC_SIZE - 1;
	berm_fill_hdr(&e->sc.hdr, cfg, cgid, BERM_OP_SYSCALL_PATH, off, task);
	berm_output(cfg, r, off, berm_vital(BERM_OP_SYSCALL_PATH, ret, 0));
	return 0;
}

/*
 * Events are emitted at exit so they carry the result: an open or connect that failed (and
 * later, one that a policy layer denied) is as much part of the trail as one that worked.
 * Their user-memory arguments were captured at entry (capture).
 */
SEC("tp_btf/sys_exit")
int BPF_PROG(berm_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 cgid;
	struct berm_call_cfg *cfg = call_of_current(&cgid);
	if (!cfg)
		return 0;

	long nr = regs->orig_ax;
	switch (nr) {
	case NR_open:
	case NR_creat:
	case NR_openat:
	case NR_openat2:
		return emit_open(cfg, cgid, regs, nr, ret);
	case NR_connect:
		return emit_connect(cfg, cgid, ret);
	}
	if (nr < 0 || nr >= BERM_MAX_SYSCALLS)
		return 0;
	/* A successful exec is the exec event; a refused one only shows here. A mapping or
	 * protection change is traced for its refusals only (a noexec mount refusing PROT_EXEC):
	 * every process makes dozens that succeed. */
	if ((nr == 59 || nr == 322 || nr == 9 || nr == 10) && ret >= 0)
		return 0;
	if (reported(cfg, nr, ret))
		emit_syscall(cfg, cgid, regs, nr, ret);
	return 0;
}
