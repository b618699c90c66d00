// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * Process lifecycle of sandboxed calls: exec, fork and exit.
 *
 * License: dual GPL-2.0-only / BSD-2-Clause. The kernel requires a GPL-compatible license for
 * the helpers used here (bpf_probe_read_*, ring buffer), hence the "Dual BSD/GPL" below.
 */
#include "include/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lib/record.h"
#include "lib/execenv.h"
#include "lib/execgate.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* berm_same_name: two file names of at most BERM_COMM_LEN bytes, NUL-terminated, are equal. */
static __always_inline int berm_same_name(const char *a, const char *b)
{
	for (int i = 0; i < BERM_COMM_LEN; i++) {
		if (a[i] != b[i])
			return 0;
		if (!a[i])
			break;
	}
	return 1;
}

/*
 * sched_process_exec fires once the new image is committed, with bprm still alive: the only
 * point where the resolved filename and the new argv (already copied to the new mm) are both
 * at hand. tp_btf gives typed, CO-RE-relocated access without kprobes (not built here).
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(berm_sched_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u64 cgid = bpf_get_current_cgroup_id();
	struct berm_call_cfg *cfg = berm_call_of(cgid);
	if (!cfg)
		return 0;
	berm_exec_gate(cfg, cgid, p, old_pid, bprm);

	/* before the exec record, which then finds the scratch buffer free again */
	berm_exec_env_emit(cfg, cgid, p);

	struct berm_rec *r = berm_rec_get();
	if (!r)
		return 0;
	struct berm_exec *e = (void *)r->b;
	__u32 off = sizeof(*e);

	/* filename: as passed to execve, already copied into the kernel (PATH_MAX at most) */
	long n = bpf_probe_read_kernel_str(&r->b[off], BERM_PATH_MAX, BPF_CORE_READ(bprm, filename));
	__u32 flen = n > 0 ? (n - 1) & (BERM_PATH_MAX - 1) : 0;
	e->filename.len = flen;
	e->filename.full = flen;
	off += flen;

	struct file *file = BPF_CORE_READ(bprm, file);
	/* The file that runs, as the kernel resolved it: a symlink, an fd path (/dev/fd/3 of
	 * execveat) or a renamed copy do not change it. Cut to BERM_EXE_PATH_MAX, which keeps the
	 * argv that follows at an offset the masks below allow. */
	__u32 pfull = 0;
	__u32 plen = berm_walk_path_max((char *)&r->b[off & (2 * BERM_PATH_MAX - 1)], BPF_CORE_READ(file, f_path.mnt),
					BPF_CORE_READ(file, f_path.dentry), p, &pfull, BERM_EXE_PATH_MAX);
	e->exe_path.len = plen;
	e->exe_path.full = pfull;
	off += plen;
	e->exe_mode = BPF_CORE_READ(file, f_inode, i_mode);
	e->exe_nlink = BPF_CORE_READ(file, f_inode, __i_nlink);
	/* The task's own credentials, committed by the exec: bprm->cred is NULL by now (the exec
	 * handed it to the task), and read as 0. kuid/kgid: the ids in the initial user namespace,
	 * what the host sees (a tool's uid inside its own user namespace maps to one of these). */
	e->euid = BPF_CORE_READ(p, cred, euid.val);
	e->egid = BPF_CORE_READ(p, cred, egid.val);
	if (bpf_probe_read_kernel_str(e->exe_name, sizeof(e->exe_name),
				      BPF_CORE_READ(file, f_path.dentry, d_name.name)) < 0)
		e->exe_name[0] = 0;
	/* The init's child executing something other than the init's binary or the tool's stage
	 * is the tool starting: from here on the call's syscalls are the tool's (counted). */
	if ((cfg->flags & BERM_CALL_SETUP) && BPF_CORE_READ(p, real_parent, tgid) == cfg->init_tgid &&
	    !berm_same_name(e->exe_name, cfg->init_exe) &&
	    !(cfg->stage_exe[0] && berm_same_name(e->exe_name, cfg->stage_exe)))
		cfg->flags &= ~BERM_CALL_SETUP;

	/* argv of the new image, not yet running: nothing can have rewritten it */
	unsigned long start = BPF_CORE_READ(p, mm, arg_start);
	unsigned long end = BPF_CORE_READ(p, mm, arg_end);
	__u64 full = end - start;
	__u32 len = full > BERM_ARGS_MAX - 1 ? BERM_ARGS_MAX - 1 : full;
	len &= BERM_ARGS_MAX - 1;
	if (bpf_probe_read_user(&r->b[off & (2 * BERM_PATH_MAX - 1)], len, (void *)start) < 0)
		len = 0;
	e->args.len = len;
	e->args.full = full;
	off += len;

	off &= BERM_REC_SIZE - 1;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_EXEC, off, p);
	berm_output(cfg, r, off, berm_vital(BERM_OP_EXEC, 0, 0));
	return 0;
}

/*
 * sched_process_fork runs after copy_process() attached the child to its cgroups, so the
 * child's own cgroup decides. That matters for the first process of a call: it is cloned
 * straight into the call's cgroup (CLONE_INTO_CGROUP) by a parent that is outside it.
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(berm_sched_fork, struct task_struct *parent, struct task_struct *child)
{
	/* Threads are not processes: the call's process tree is what we report. */
	if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid))
		return 0;

	__u64 cgid = BPF_CORE_READ(child, cgroups, dfl_cgrp, kn, id);
	struct berm_call_cfg *cfg = berm_call_of(cgid);
	if (!cfg)
		return 0;

	struct berm_fork *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_FORK, 0, 0));
	if (!e)
		return 0;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_FORK, sizeof(*e), parent);
	e->child_pid = BPF_CORE_READ(child, tgid);
	e->child_tid = BPF_CORE_READ(child, pid);
	berm_submit(e, sizeof(*e));
	return 0;
}

/*
 * sched_process_exit fires in do_exit() after exit_code is set and before cgroup_exit(), so
 * the exit is still attributed to the call, and it is submitted before the cgroup can report
 * itself empty: once the cgroup is empty, every exit event of the call is in the ring.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(berm_sched_exit, struct task_struct *p)
{
	/* One event per process: the thread-group leader carries the group's exit status. */
	if (BPF_CORE_READ(p, pid) != BPF_CORE_READ(p, tgid))
		return 0;

	__u64 cgid = bpf_get_current_cgroup_id();
	struct berm_call_cfg *cfg = berm_call_of(cgid);
	if (!cfg)
		return 0;

	struct berm_exit *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_EXIT, 0, 0));
	if (!e)
		return 0;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_EXIT, sizeof(*e), p);
	e->code = BPF_CORE_READ(p, exit_code);
	e->thread_group_dead = BPF_CORE_READ(p, signal, live.counter) == 0;
	berm_submit(e, sizeof(*e));
	return 0;
}
