/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * The environment of a new image, for the agent's secret scan (struct berm_exec_env). It is
 * its own record, emitted just before the exec record from the same hook and task, so the exec
 * record and its hook stay as they are and the agent pairs the two by thread id. The agent
 * scans the bytes for live secrets of other calls and drops them: an environment is never
 * recorded (its values are often credentials), only its length and whether it was cut.
 */
#ifndef BERM_EXECENV_H
#define BERM_EXECENV_H

#include "record.h"

/* Copies the first BERM_ENV_MAX - 1 bytes of p's new environment (mm->env_start..env_end, in
 * the new mm: written by the kernel during the exec, nothing of the image has run yet) into a
 * record; env.full says how long it was, so a cut, and what the scan missed, is on record. */
static __always_inline void berm_exec_env_emit(struct berm_call_cfg *cfg, __u64 cgid, struct task_struct *p)
{
	struct berm_rec *r = berm_rec_get();
	if (!r)
		return;
	struct berm_exec_env *e = (void *)r->b;
	unsigned long start = BPF_CORE_READ(p, mm, env_start);
	unsigned long end = BPF_CORE_READ(p, mm, env_end);
	__u64 full = end > start ? end - start : 0;
	__u32 len = full > BERM_ENV_MAX - 1 ? BERM_ENV_MAX - 1 : full;
	len &= BERM_ENV_MAX - 1;
	if (bpf_probe_read_user(&r->b[sizeof(*e)], len, (void *)start) < 0)
		len = 0;
	e->env.len = len;
	e->env.full = full > 0xfffffffe ? BERM_LEN_UNKNOWN : full;
	__u32 size = (sizeof(*e) + len) & (BERM_REC_SIZE - 1);
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_EXEC_ENV, size, p);
	berm_output(cfg, r, size, berm_vital(BERM_OP_EXEC_ENV, 0, 0));
}

#endif /* BERM_EXECENV_H */
