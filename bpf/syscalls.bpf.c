// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * Syscalls of sandboxed calls: per-call counters aggregated in the kernel, and individual
 * events for file opens, connects and a configurable set of syscall numbers.
 *
 * License: dual GPL-2.0-only / BSD-2-Clause ("Dual BSD/GPL" for the kernel's helper checks).
 */
#include "include/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "lib/maps.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* x86-64 syscall numbers used below (this object is built for amd64 only). */
#define NR_open 2
#define NR_connect 42
#define NR_creat 85
#define NR_openat 257
#define NR_openat2 437

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10

/* Per-call syscall counters, indexed by slot. Per-CPU: no atomics on the hot path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct berm_syscounts);
} berm_syscounts SEC(".maps");

/*
 * Counting happens at entry: exit_group and a successful execve never return to the caller,
 * so an exit-side counter would miss them. The sandbox check is the first thing done, so a
 * process outside every sandbox pays one hash lookup.
 */
SEC("tp_btf/sys_enter")
int BPF_PROG(berm_sys_enter, struct pt_regs *regs, long id)
{
	struct berm_call_cfg *cfg = berm_call_of(bpf_get_current_cgroup_id());
	if (!cfg)
		return 0;
	if (id < 0 || id >= BERM_MAX_SYSCALLS)
		return 0;
	__u32 slot = cfg->slot;
	struct berm_syscounts *c = bpf_map_lookup_elem(&berm_syscounts, &slot);
	if (c)
		c->n[id & (BERM_MAX_SYSCALLS - 1)] += 1;
	return 0;
}

static __always_inline void emit_open(struct berm_call_cfg *cfg, __u64 cgid, struct pt_regs *regs,
				      long nr, long ret)
{
	struct berm_open *e = berm_reserve(cfg, sizeof(*e));
	if (!e)
		return;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_OPEN, sizeof(*e), task);
	e->ret = ret;
	e->nr = nr;
	const char *path;
	if (nr == NR_open || nr == NR_creat) {
		e->dirfd = -100; /* AT_FDCWD */
		path = (const char *)regs->di;
		e->flags = nr == NR_creat ? 0x241 /* O_CREAT|O_WRONLY|O_TRUNC */ : regs->si;
		e->mode = nr == NR_creat ? regs->si : regs->dx;
	} else if (nr == NR_openat) {
		e->dirfd = regs->di;
		path = (const char *)regs->si;
		e->flags = regs->dx;
		e->mode = regs->r10;
	} else {
		struct open_how how = {};
		e->dirfd = regs->di;
		path = (const char *)regs->si;
		bpf_probe_read_user(&how, sizeof(how), (void *)regs->dx);
		e->flags = how.flags;
		e->mode = how.mode;
	}
	if (bpf_probe_read_user_str(e->path, sizeof(e->path), path) < 0)
		e->path[0] = 0;
	berm_submit(e, sizeof(*e));
}

static __always_inline void emit_connect(struct berm_call_cfg *cfg, __u64 cgid, struct pt_regs *regs,
					 long ret)
{
	struct berm_connect *e = berm_reserve(cfg, sizeof(*e));
	if (!e)
		return;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_CONNECT, sizeof(*e), task);
	e->ret = ret;
	e->addrlen = regs->dx;
	e->port = 0;
	e->unix_path[0] = 0;
	__builtin_memset(e->addr, 0, sizeof(e->addr));

	void *uaddr = (void *)regs->si;
	__u16 family = 0;
	bpf_probe_read_user(&family, sizeof(family), uaddr);
	e->family = family;
	if (family == AF_INET) {
		struct sockaddr_in sin = {};
		bpf_probe_read_user(&sin, sizeof(sin), uaddr);
		e->port = bpf_ntohs(sin.sin_port);
		__builtin_memcpy(e->addr, &sin.sin_addr, 4);
	} else if (family == AF_INET6) {
		struct sockaddr_in6 sin6 = {};
		bpf_probe_read_user(&sin6, sizeof(sin6), uaddr);
		e->port = bpf_ntohs(sin6.sin6_port);
		__builtin_memcpy(e->addr, &sin6.sin6_addr, 16);
	} else if (family == AF_UNIX) {
		if (bpf_probe_read_user_str(e->unix_path, sizeof(e->unix_path), uaddr + 2) < 0)
			e->unix_path[0] = 0;
	}
	berm_submit(e, sizeof(*e));
}

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
	case 88:  /* symlink */
	case 90:  /* chmod */
	case 92:  /* chown */
	case 94:  /* lchown */
	case 133: /* mknod */
	case 155: /* pivot_root */
	case 161: /* chroot */
	case 166: /* umount2 */
	case 319: /* memfd_create: the name */
		return 0;
	case 165: /* mount: the target */
	case 258: /* mkdirat */
	case 259: /* mknodat */
	case 260: /* fchownat */
	case 263: /* unlinkat */
	case 264: /* renameat */
	case 265: /* linkat */
	case 268: /* fchmodat */
	case 269: /* faccessat */
	case 316: /* renameat2 */
	case 322: /* execveat */
	case 439: /* faccessat2 */
	case 452: /* fchmodat2 */
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
	case 88:  /* symlink */
	case 155: /* pivot_root */
		return 1;
	case 264: /* renameat */
	case 265: /* linkat */
	case 316: /* renameat2 */
		return 3;
	case 165: /* mount: the source */
	case 266: /* symlinkat: the target */
		return 0;
	}
	return -1;
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

static __always_inline void emit_syscall(struct berm_call_cfg *cfg, __u64 cgid, struct pt_regs *regs,
					 long nr, long ret)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	int a = path_arg(nr), b = path2_arg(nr);
	if (a < 0) {
		struct berm_syscall *e = berm_reserve(cfg, sizeof(*e));
		if (!e)
			return;
		berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_SYSCALL, sizeof(*e), task);
		fill_syscall(e, regs, nr, ret);
		berm_submit(e, sizeof(*e));
		return;
	}
	struct berm_syscall_path *e = berm_reserve(cfg, sizeof(*e));
	if (!e)
		return;
	berm_fill_hdr(&e->sc.hdr, cfg, cgid, BERM_OP_SYSCALL_PATH, sizeof(*e), task);
	fill_syscall(&e->sc, regs, nr, ret);
	e->path[0] = 0;
	e->path2[0] = 0;
	if (a < 6 && bpf_probe_read_user_str(e->path, sizeof(e->path), (void *)e->sc.args[a]) < 0)
		e->path[0] = 0;
	if (b >= 0 && b < 6 && bpf_probe_read_user_str(e->path2, sizeof(e->path2), (void *)e->sc.args[b]) < 0)
		e->path2[0] = 0;
	berm_submit(e, sizeof(*e));
}

/*
 * Events are emitted at exit so they carry the result: an open or connect that failed (and
 * later, one that a policy layer denied) is as much part of the trail as one that worked.
 * The user-space argument pointers are still valid here; the saved registers still hold the
 * arguments (only ax is overwritten by the return value).
 */
SEC("tp_btf/sys_exit")
int BPF_PROG(berm_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	struct berm_call_cfg *cfg = berm_call_of(cgid);
	if (!cfg)
		return 0;

	long nr = regs->orig_ax;
	switch (nr) {
	case NR_open:
	case NR_creat:
	case NR_openat:
	case NR_openat2:
		emit_open(cfg, cgid, regs, nr, ret);
		return 0;
	case NR_connect:
		emit_connect(cfg, cgid, regs, ret);
		return 0;
	}
	if (nr < 0 || nr >= BERM_MAX_SYSCALLS)
		return 0;
	/* A successful exec is the exec event; a refused one only shows here. A mapping or
	 * protection change is traced for its refusals only (a noexec mount refusing PROT_EXEC):
	 * every process makes dozens that succeed. */
	if ((nr == 59 || nr == 322 || nr == 9 || nr == 10) && ret >= 0)
		return 0;
	__u32 word = ((__u32)nr / 64) & (BERM_MAX_SYSCALLS / 64 - 1);
	if (cfg->sys_mask[word] & (1ULL << (nr % 64)))
		emit_syscall(cfg, cgid, regs, nr, ret);
	return 0;
}
