/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * Exec approvals, enforced at the exec hook (sched_process_exec: past the point of no return,
 * before the new image runs one instruction of its own).
 *
 * A held execve can only be released with SECCOMP_USER_NOTIF_FLAG_CONTINUE (no one can exec
 * for the tool), and then the kernel reads path and argv again, from memory another thread
 * (or a vfork parent's) may have rewritten since the decision. So the decision is made on
 * what the supervisor read once, and this hook checks what the kernel actually executes
 * against it: the file that runs (its inode, however it was named) and the argv it copied
 * into the new image. An exec of a gated program with no entry for its thread, or with
 * another file or argv, gets SIGKILL before it runs and a BERM_OP_EXEC_DENY record.
 * An exec of any other program costs one hash lookup here.
 */
#ifndef BERM_EXECGATE_H
#define BERM_EXECGATE_H

#include "record.h"

/* The call's gated programs (file identities), written when the supervisor starts. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_XG_MAX_GATES);
	__type(key, struct berm_xg_gate_key);
	__type(value, __u8);
} berm_xg_gates SEC(".maps");

/* One-shot decisions: written by the supervisor right before CONTINUE, consumed here. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_XG_MAX_ALLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct berm_xg_allow_key);
	__type(value, struct berm_xg_allow);
} berm_xg_allows SEC(".maps");

/* Twice the size used, so that a masked length keeps every read inside its buffer. */
struct berm_xg_scratch {
	__u8 want[2 * BERM_XG_ARGV_MAX];
	__u8 got[2 * BERM_XG_ARGV_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct berm_xg_scratch);
} berm_xg_scratch_map SEC(".maps");

struct berm_xg_cmp {
	__u32 len;
	__u32 diff;
};

/* One byte per bpf_loop() step: the callback is verified once, not per byte. */
static long berm_xg_cmp_step(__u64 i, void *ctx)
{
	struct berm_xg_cmp *c = ctx;
	__u32 zero = 0;
	if (i >= c->len)
		return 1;
	struct berm_xg_scratch *s = bpf_map_lookup_elem(&berm_xg_scratch_map, &zero);
	if (!s) {
		c->diff = 1;
		return 1;
	}
	__u32 k = i & (BERM_XG_ARGV_MAX - 1);
	if (s->want[k] != s->got[k]) {
		c->diff = 1;
		return 1;
	}
	return 0;
}

static __always_inline int berm_xg_gated(__u64 cgid, struct file *f, __u32 *dev, __u64 *ino)
{
	struct berm_xg_gate_key k = {.cgroup_id = cgid};
	k.ino = BPF_CORE_READ(f, f_inode, i_ino);
	k.dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	*dev = k.dev;
	*ino = k.ino;
	return bpf_map_lookup_elem(&berm_xg_gates, &k) != NULL;
}

/* The kill and its record. The signal is pending before the new image returns to user
 * space, where it is taken before the first instruction. */
static __always_inline void berm_xg_kill(struct berm_call_cfg *cfg, __u64 cgid, struct task_struct *p, struct file *f,
					 __u32 reason, __u32 dev, __u64 ino)
{
	bpf_send_signal(9 /* SIGKILL */);
	struct berm_exec_deny *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_EXEC_DENY, 0, 0));
	if (!e)
		return;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_EXEC_DENY, sizeof(*e), p);
	e->reason = reason;
	e->dev = dev;
	e->ino = ino;
	if (bpf_probe_read_kernel_str(e->name, sizeof(e->name), BPF_CORE_READ(f, f_path.dentry, d_name.name)) < 0)
		e->name[0] = 0;
	berm_submit(e, sizeof(*e));
}

/* Holds the exec that just committed to what the approval supervisor decided for it. */
static __always_inline void berm_exec_gate(struct berm_call_cfg *cfg, __u64 cgid, struct task_struct *p, pid_t old_pid,
					   struct linux_binprm *bprm)
{
	struct file *file = BPF_CORE_READ(bprm, file);
	struct file *named = BPF_CORE_READ(bprm, executable); /* set when an interpreter runs it */
	__u32 dev, ndev;
	__u64 ino, nino;
	int gated = berm_xg_gated(cgid, file, &dev, &ino);
	if (!named) {
		named = file;
		ndev = dev;
		nino = ino;
	} else if (gated) {
		/* The supervisor decided on the script, not on what it names as its interpreter. */
		berm_xg_kill(cfg, cgid, p, file, BERM_XG_INTERP, dev, ino);
		return;
	} else {
		gated = berm_xg_gated(cgid, named, &ndev, &nino);
	}
	struct berm_xg_allow_key k = {.cgroup_id = cgid, .tid = old_pid};
	struct berm_xg_allow *a = bpf_map_lookup_elem(&berm_xg_allows, &k);
	if (!gated) {
		if (a)
			bpf_map_delete_elem(&berm_xg_allows, &k);
		return;
	}
	if (!a) {
		berm_xg_kill(cfg, cgid, p, named, BERM_XG_NO_APPROVAL, ndev, nino);
		return;
	}
	__u32 zero = 0;
	struct berm_xg_scratch *s = bpf_map_lookup_elem(&berm_xg_scratch_map, &zero);
	__u32 want = a->len;
	int same_file = a->dev == ndev && a->ino == nino;
	if (!s || want > BERM_XG_ARGV_MAX || bpf_probe_read_kernel(s->want, want & (2 * BERM_XG_ARGV_MAX - 1), a->argv) < 0)
		want = BERM_XG_ARGV_MAX + 1; /* unreadable: no match */
	bpf_map_delete_elem(&berm_xg_allows, &k);
	if (!same_file) {
		berm_xg_kill(cfg, cgid, p, named, BERM_XG_OTHER_FILE, ndev, nino);
		return;
	}
	if (named != file) {
		/* A script: its argv is the interpreter's now. A gated script is refused by the
		 * supervisor; this is a script that became gated since. */
		berm_xg_kill(cfg, cgid, p, named, BERM_XG_INTERP, ndev, nino);
		return;
	}
	unsigned long start = BPF_CORE_READ(p, mm, arg_start);
	unsigned long end = BPF_CORE_READ(p, mm, arg_end);
	__u64 got = end - start;
	if (!s || got != want || got > BERM_XG_ARGV_MAX ||
	    bpf_probe_read_user(s->got, got & (2 * BERM_XG_ARGV_MAX - 1), (void *)start) < 0) {
		berm_xg_kill(cfg, cgid, p, named, BERM_XG_OTHER_ARGV, ndev, nino);
		return;
	}
	struct berm_xg_cmp c = {.len = got};
	bpf_loop(BERM_XG_ARGV_MAX, berm_xg_cmp_step, &c, 0);
	if (c.diff)
		berm_xg_kill(cfg, cgid, p, named, BERM_XG_OTHER_ARGV, ndev, nino);
}

#endif
