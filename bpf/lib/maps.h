/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * Maps shared by every berm object. Each object declares them; the agent creates them once
 * and hands the same maps to every object (MapReplacements), so one cgroup lookup table,
 * one event ring and one drop counter serve all programs.
 */
#ifndef BERM_MAPS_H
#define BERM_MAPS_H

#include "berm.h"

/* Sandboxed cgroups: cgroup v2 id -> call configuration. Anything not here is never reported. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u64);
	__type(value, struct berm_call_cfg);
} berm_calls SEC(".maps");

/* All events of all calls; user space sizes it at load time. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} berm_events SEC(".maps");

/* Events lost in the kernel, per call slot, vital and noise apart (struct berm_drops). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct berm_drops);
} berm_drops SEC(".maps");

/*
 * The ring's share of each call: bytes a slot's events reserved (the kernel adds, here) and
 * bytes of them the agent has read (the agent writes, per batch). Their difference is what the
 * call holds in the ring now.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} berm_ring_in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} berm_ring_out SEC(".maps");

/*
 * The kernel's copy of a connect's destination, from the cgroup connect hook to the connect's
 * exit (struct berm_kaddr). The connect's entry deletes the thread's key, so an address the
 * hook saw in another syscall (a TCP Fast Open sendto) is never taken for a connect's; LRU:
 * a thread that died between hook and exit leaves nothing behind for long.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct berm_kaddr);
} berm_connect_addr SEC(".maps");

/*
 * What a syscall's entry captured for its exit (syscalls.bpf.c), and what the BPF LSM hooks
 * saw of its objects while it ran (lsm.bpf.c): shared, so that a hook adds the kernel's view
 * to the capture of the syscall it runs in, and the exit puts both in one record. A task is
 * in one syscall at a time; task storage is allocated on a task's first captured syscall and
 * freed with the task. The entry resets the kernel's view with the rest (capture).
 */
struct pending {
	__u32 nr;
	__u32 source;
	__u32 source2;
	__u32 addrlen;
	struct berm_str path;
	struct berm_str path2;
	__u64 uptr1; /* the user pointers path and path2 were read from (source USER) */
	__u64 uptr2;
	__u8 addr[128];
	char p1[BERM_PATH_MAX];
	char p2[BERM_PATH_MAX];
	struct berm_kobj k1; /* the kernel's view of path's object (k1.path's bytes in kp1) */
	struct berm_kobj k2; /* and of path2's */
	char kp1[BERM_PATH_MAX];
	char kp2[BERM_PATH_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct pending);
} berm_pending SEC(".maps");

/* Wake the reader only once this many bytes wait: wake-ups dominate the cost of an event. */
const volatile __u64 wakeup_bytes = 64 << 10; /* set at load time: tracer.Config.WakeupBytes */

/*
 * Once the ring is more than half full, a call already holding this many bytes of it gets no
 * more noise, and once it is in its last quarter no more vital records either: its events are
 * dropped (counted against it) and the rest stays for the others. One call's flood cannot take
 * the ring from its neighbours. 0: no bound.
 */
const volatile __u64 ring_share = 0;

static __always_inline struct berm_call_cfg *berm_call_of(__u64 cgid)
{
	return bpf_map_lookup_elem(&berm_calls, &cgid);
}

static __always_inline void berm_count_drop(__u32 slot, int vital)
{
	struct berm_drops *n = bpf_map_lookup_elem(&berm_drops, &slot);
	if (!n)
		return;
	if (vital)
		n->vital += 1;
	else
		n->noise += 1;
}

/*
 * Whether the ring takes a record of the call in slot now (in: the call's reserved bytes).
 * The ring's last quarter is vital records' (berm_vital): past three quarters of the ring
 * unread, noise is dropped in the kernel, so a tool that floods cheap noise (failed opens,
 * a syscall storm) to blind its trail loses its noise, and its exec, deletion or denial that
 * follows still has room. A call past its share loses its noise once the ring is half full,
 * its vital records only in the last quarter: its own noise cannot cost it its vital records.
 */
static __always_inline int berm_admit(__u32 slot, __u64 *in, int vital)
{
	__u64 avail = bpf_ringbuf_query(&berm_events, BPF_RB_AVAIL_DATA);
	__u64 ring = bpf_ringbuf_query(&berm_events, BPF_RB_RING_SIZE);
	__u64 noise_top = ring / 4 * 3;
	if (!vital && avail > noise_top)
		return 0;
	if (ring_share && in) {
		__u64 *out = bpf_map_lookup_elem(&berm_ring_out, &slot);
		__s64 held = (__s64)(*in - (out ? *out : 0));
		if (held > (__s64)ring_share && avail > (vital ? noise_top : ring / 2))
			return 0;
	}
	return 1;
}

/* Room in the ring for a record of size bytes of the call, vital or not; NULL: dropped, and
 * counted against the call by class. */
static __always_inline void *berm_reserve(struct berm_call_cfg *cfg, __u64 size, int vital)
{
	__u32 slot = cfg->slot;
	__u64 *in = bpf_map_lookup_elem(&berm_ring_in, &slot);
	if (!berm_admit(slot, in, vital)) {
		berm_count_drop(slot, vital);
		return 0;
	}
	void *e = bpf_ringbuf_reserve(&berm_events, size, 0);
	if (!e)
		berm_count_drop(slot, vital);
	else if (in)
		__sync_fetch_and_add(in, size);
	return e;
}

/*
 * Wake the reader once per wakeup_bytes of data, when this event is the one that crosses the
 * threshold (the producer position already counts it). Waking on every event past the
 * threshold would cost a wake-up per event exactly when the reader is behind; the reader's
 * own deadline picks up whatever stays below it.
 */
static __always_inline void berm_submit(void *e, __u64 size)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	__u64 avail = bpf_ringbuf_query(&berm_events, BPF_RB_AVAIL_DATA);
	__u64 rec = (size + 8 + 7) & ~7ULL; /* record header, 8-byte alignment */
	if (avail >= wakeup_bytes && avail - rec < wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

static __always_inline void berm_fill_hdr(struct berm_hdr *h, struct berm_call_cfg *cfg, __u64 cgid,
					  __u16 op, __u16 size, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	h->ts_ns = bpf_ktime_get_boot_ns();
	h->cgroup_id = cgid;
	h->slot = cfg->slot;
	h->op = op;
	h->size = size;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->ppid = BPF_CORE_READ(task, real_parent, tgid);
	h->uid = (__u32)bpf_get_current_uid_gid();
	bpf_get_current_comm(h->comm, sizeof(h->comm));
}

#endif /* BERM_MAPS_H */
