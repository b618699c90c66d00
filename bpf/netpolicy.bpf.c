// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * Network enforcement of sandboxed calls: cgroup sock hooks, attached once above the calls'
 * cgroups (or to a call's own), judge every connect, unconnected UDP send and socket() against the call's compiled
 * egress policy (sandboxer/policy NetPolicy). Default deny; a registered call without a policy
 * is denied everything (fail closed). Each denial, or would-be denial in audit mode, is a
 * berm_net_deny event in the shared ring.
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

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

#include "lib/dnspin.h"
#include "lib/inject.h"

/*
 * A call's policy is a generation: a number never reused, that keys the call's prefixes in
 * the one trie and its record in berm_net_gens. The slot's generation is one aligned 8-byte
 * word the agent stores atomically (the array is mmapped), so installing, replacing or
 * removing a call's policy is one store, after the new version's entries are all written and
 * before the old one's are deleted: a decision reads the word once and sees one whole version.
 * No map-in-map: updates of those make every writer wait for an RCU grace period.
 */

/* Prefixes of every installed version of every call: room for each slot's policy twice (a
 * hot reload holds both versions until the old one is deleted). */
#define NET_TRIE_ENTRIES (BERM_MAX_SLOTS * BERM_MAX_NET_PREFIXES * 2)

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, NET_TRIE_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* required for LPM tries; allocated on use */
	__type(key, struct berm_net_key);
	__type(value, struct berm_net_prefix);
} berm_net_policy SEC(".maps");

/* generation -> the cgroup it was installed for and its socket rules */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_MAX_SLOTS * 4);
	__type(key, __u64);
	__type(value, struct berm_net_gen);
} berm_net_gens SEC(".maps");

/* call slot -> the generation in effect, 0: none (a registered call is denied everything) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BERM_MAX_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} berm_net_slots SEC(".maps");

/* cgroup levels searched for the call a nested cgroup belongs to */
#define NET_MAX_LEVEL 16

/*
 * Cgroups attached as calls by any berm agent of this node: every agent's programs attach at
 * berm's root, and all share this map (pinned in bpffs). Below the root, a cgroup of another
 * agent's call is that agent's programs' to judge; a cgroup in no agent's call (a process that
 * outlived its call, a sandbox not claimed yet) gets no network: fail closed.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_MAX_SLOTS * 16);
	__type(key, __u64);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} berm_net_owned SEC(".maps");

/* 1: refuse cgroups no agent owns (the agent sets it when berm_net_owned is shared) */
const volatile __u32 fail_closed = 0;

/*
 * The call the current task belongs to. Programs attached to a cgroup also run for every
 * cgroup below it, so a task that made itself a child cgroup inside its call's is found
 * through its nearest registered ancestor, and judged as the call: otherwise nesting would be
 * a way out.
 */
static __always_inline struct berm_call_cfg *net_call(__u64 *cgid)
{
	*cgid = bpf_get_current_cgroup_id();
	struct berm_call_cfg *cfg = berm_call_of(*cgid);
	if (cfg)
		return cfg;
	for (int level = NET_MAX_LEVEL; level >= 0; level--) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (!id)
			continue; /* deeper than the task's own cgroup */
		cfg = berm_call_of(id);
		if (cfg) {
			*cgid = id;
			return cfg;
		}
	}
	return 0;
}

/* The verdict for a task in no call of this agent's. */
static __always_inline int unowned_verdict(void)
{
	if (!fail_closed)
		return 1;
	__u64 id = bpf_get_current_cgroup_id();
	if (bpf_map_lookup_elem(&berm_net_owned, &id))
		return 1;
	for (int level = NET_MAX_LEVEL; level >= 0; level--) {
		id = bpf_get_current_ancestor_cgroup_id(level);
		if (id && bpf_map_lookup_elem(&berm_net_owned, &id))
			return 1; /* another agent's call: its programs judge */
	}
	return 0;
}

static __always_inline void emit_deny(struct berm_call_cfg *cfg, __u64 cgid, __u32 rule, __u32 audit,
				      __u32 nr, __u16 family, __u16 port, __u32 proto, const __u8 *addr)
{
	struct berm_net_deny *e = berm_reserve(cfg, sizeof(*e), berm_vital(BERM_OP_NET_DENY, 0, 0));
	if (!e)
		return;
	berm_fill_hdr(&e->hdr, cfg, cgid, BERM_OP_NET_DENY, sizeof(*e), bpf_get_current_task_btf());
	e->rule = rule;
	e->audit = audit;
	e->nr = nr;
	e->family = family;
	e->port = port;
	e->proto = proto;
	e->pad = 0; /* ring memory holds older events: no stale bytes to user space */
	__builtin_memcpy(e->addr, addr, sizeof(e->addr));
	berm_submit(e, sizeof(*e));
}

/*
 * The version of the call's policy in effect (its generation in *gen), or none. The slot's
 * word is read once: everything after uses that one version.
 */
static __always_inline struct berm_net_gen *net_policy(struct berm_call_cfg *cfg, __u64 cgid, __u64 *gen)
{
	__u32 slot = cfg->slot;
	__u64 *word = bpf_map_lookup_elem(&berm_net_slots, &slot);
	if (!word)
		return 0;
	*gen = *(volatile __u64 *)word;
	if (!*gen)
		return 0;
	struct berm_net_gen *g = bpf_map_lookup_elem(&berm_net_gens, gen);
	if (!g || g->cgroup_id != cgid)
		return 0; /* the slot is another call's: not this one's policy */
	return g;
}

/*
 * The kernel half of NetPolicy.Decide: the longest prefix containing the address, then its
 * entries in order; no policy, no prefix or no matching entry is the default deny (rule 0).
 */
static __always_inline int decide(struct berm_call_cfg *cfg, __u64 cgid, struct berm_net_key *key, __u16 port,
				  __u8 proto, __u32 *rule)
{
	*rule = 0;
	__u64 gen;
	if (!net_policy(cfg, cgid, &gen))
		return 0;
	__builtin_memcpy(key->gen, &gen, sizeof(gen));
	struct berm_net_prefix *p = bpf_map_lookup_elem(&berm_net_policy, key);
	if (!p)
		return 0;
	for (__u32 i = 0; i < BERM_MAX_NET_ENTRIES; i++) {
		if (i >= p->n)
			break;
		struct berm_net_entry *e = &p->e[i];
		if ((e->proto == 0 || e->proto == proto) && port >= e->port_lo && port <= e->port_hi) {
			*rule = e->rule;
			return e->allow;
		}
	}
	return 0;
}

/*
 * Keep the destination of a registered call's connect for the connect's exit (syscalls.bpf.c):
 * ctx holds the kernel's copy of the sockaddr, the one the kernel acts on, which the caller can
 * no longer rewrite.
 */
static __always_inline void note_connect(__u16 family, __u16 port, const __u8 *addr)
{
	struct berm_kaddr k = {.family = family, .port = port};
	if (family == AF_INET)
		__builtin_memcpy(k.addr, &addr[12], 4);
	else
		__builtin_memcpy(k.addr, addr, 16);
	__u64 tid = bpf_get_current_pid_tgid();
	bpf_map_update_elem(&berm_connect_addr, &tid, &k, BPF_ANY);
}

/* Judge one destination; returns the hook's verdict (1 proceed, 0 EPERM). */
static __always_inline int judge_addr(struct bpf_sock_addr *ctx, struct berm_net_key *key, __u16 family, int connect)
{
	__u64 cgid;
	struct berm_call_cfg *cfg = net_call(&cgid);
	if (!cfg)
		return unowned_verdict();

	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (connect)
		note_connect(family, port, key->addr);
	__u8 proto = (__u8)ctx->protocol;
	__u32 rule;
	if (berm_dns_redirect(ctx, cgid, port, family == AF_INET6))
		return 1; /* to berm's resolver: the call's DNS is answered there or nowhere */
	__u32 inspect = 0; /* the call's egress port, if it has injected credentials */
	if (connect && proto == IPPROTO_TCP) {
		inspect = berm_inject_port(cgid);
		/* to berm's injecting egress: a credential's host is reached through it or not at all */
		int moved = inspect ? berm_inject_redirect(ctx, cgid, key->addr, port, family == AF_INET6) : 0;
		if (moved > 0)
			return 1;
		if (moved < 0) {
			emit_deny(cfg, cgid, 0, 0, 0, family, port, proto, key->addr);
			return 0;
		}
	}
	if (berm_dns_foreign(cgid, key->addr, port)) {
		__u32 audit = cfg->flags & BERM_CALL_AUDIT ? 1 : 0;
		emit_deny(cfg, cgid, 0, audit, 0, family, port, proto, key->addr);
		return audit;
	}
	int pass = decide(cfg, cgid, key, port, proto, &rule) ? 1 : 0;
	/* only where no rule decided: a builtin deny (the metadata service) stays, whatever DNS says */
	if (!pass && rule == 0 && berm_dns_pinned(cgid, key->addr, port, proto, &rule))
		pass = 1;
	if (!pass) {
		__u32 audit = cfg->flags & BERM_CALL_AUDIT ? 1 : 0;
		emit_deny(cfg, cgid, rule, audit, 0, family, port, proto, key->addr);
		pass = audit;
	}
	if (pass && inspect) {
		/*
		 * A call with injected credentials: whatever else it reaches over TCP goes through its
		 * egress too, which looks for the placeholder in what the tool sends.
		 */
		if (berm_inject_move(ctx, cgid, key->addr, port, family == AF_INET6, inspect, BERM_INJECT_INSPECT) < 0) {
			emit_deny(cfg, cgid, 0, 0, 0, family, port, proto, key->addr);
			return 0;
		}
	}
	return pass;
}

static __always_inline int judge4(struct bpf_sock_addr *ctx, int connect)
{
	struct berm_net_key key = {.prefixlen = BERM_NET_GEN_BITS + 128};
	key.addr[10] = 0xff;
	key.addr[11] = 0xff;
	__u32 ip4 = ctx->user_ip4; /* network byte order: its memory bytes are the address */
	__builtin_memcpy(&key.addr[12], &ip4, 4);
	return judge_addr(ctx, &key, AF_INET, connect);
}

static __always_inline int judge6(struct bpf_sock_addr *ctx, int connect)
{
	struct berm_net_key key = {.prefixlen = BERM_NET_GEN_BITS + 128};
	__u32 w[4];
	w[0] = ctx->user_ip6[0];
	w[1] = ctx->user_ip6[1];
	w[2] = ctx->user_ip6[2];
	w[3] = ctx->user_ip6[3];
	/* IPv4-mapped destinations land on the same keys as IPv4: one policy for both */
	__builtin_memcpy(key.addr, w, sizeof(w));
	return judge_addr(ctx, &key, AF_INET6, connect);
}

/*
 * connect() of IPv4 sockets, TCP and UDP alike, and TCP Fast Open's sendto: the one point
 * before any packet leaves where the destination is known and the call can still get EPERM.
 */
SEC("cgroup/connect4")
int berm_connect4(struct bpf_sock_addr *ctx)
{
	return judge4(ctx, 1);
}

/* connect() of IPv6 sockets, including IPv4-mapped destinations on dual-stack sockets. */
SEC("cgroup/connect6")
int berm_connect6(struct bpf_sock_addr *ctx)
{
	return judge6(ctx, 1);
}

/*
 * Unconnected UDP sends (sendto/sendmsg with an address) never pass connect: each datagram's
 * destination is judged here. An IPv6 socket's send to an IPv4-mapped address arrives here too.
 */
SEC("cgroup/sendmsg4")
int berm_sendmsg4(struct bpf_sock_addr *ctx)
{
	return judge4(ctx, 0);
}

/* Unconnected UDP sends of IPv6 sockets. */
SEC("cgroup/sendmsg6")
int berm_sendmsg6(struct bpf_sock_addr *ctx)
{
	return judge6(ctx, 0);
}

/*
 * socket() of the IP families: the address hooks above judge only TCP and UDP, so anything
 * else (raw, ICMP ping, SCTP, UDP-Lite, MPTCP) would reach destinations nobody judges and is
 * refused at creation, whatever the rules. The kernel runs this hook for AF_INET and AF_INET6
 * only; other families (packet, netlink) are the seccomp layer's and the dropped
 * capabilities' to refuse.
 */
SEC("cgroup/sock_create")
int berm_sock_create(struct bpf_sock *sk)
{
	__u64 cgid;
	struct berm_call_cfg *cfg = net_call(&cgid);
	if (!cfg)
		return unowned_verdict();

	__u32 family = sk->family, type = sk->type, protocol = sk->protocol;
	int ok = 0;
	__u64 gen;
	struct berm_net_gen *g = net_policy(cfg, cgid, &gen);
	if (g) {
		struct berm_net_socks *s = &g->socks;
		for (__u32 i = 0; i < BERM_MAX_SOCK_RULES; i++) {
			if (i >= s->n)
				break;
			if (s->r[i].family == family && (s->r[i].type == 0 || s->r[i].type == type)) {
				ok = 1;
				break;
			}
		}
	}
	if (ok && (family == AF_INET || family == AF_INET6))
		ok = (type == SOCK_STREAM && protocol == IPPROTO_TCP) ||
		     (type == SOCK_DGRAM && protocol == IPPROTO_UDP);
	if (ok)
		return 1;

	__u32 audit = cfg->flags & BERM_CALL_AUDIT ? 1 : 0;
	__u8 none[16] = {};
	emit_deny(cfg, cgid, 0, audit, BERM_NR_SOCKET, family, 0, type << 16 | (protocol & 0xffff), none);
	return audit;
}

/*
 * recvmsg() of UDP sockets, where a datagram's source address is handed to the tool: a reply
 * from berm's resolver to a query berm_dns_redirect moved shows the address the query was
 * sent to, as the tool's resolver library expects. Never refuses (a recvmsg hook cannot).
 */
SEC("cgroup/recvmsg4")
int berm_dns_recvmsg4(struct bpf_sock_addr *ctx)
{
	berm_dns_unredirect(ctx, 0);
	return 1;
}

/* The same for IPv6 sockets (and IPv4 replies on dual-stack ones, as IPv4-mapped). */
SEC("cgroup/recvmsg6")
int berm_dns_recvmsg6(struct bpf_sock_addr *ctx)
{
	berm_dns_unredirect(ctx, 1);
	return 1;
}

/*
 * getpeername() of a socket whose connect berm_dns_redirect moved (TCP DNS, connected UDP):
 * the peer shown is the address the tool connected to, not berm's resolver. A tool cannot
 * tell from its own socket where its DNS really goes, nor learn the resolver's port.
 */
SEC("cgroup/getpeername4")
int berm_dns_getpeername4(struct bpf_sock_addr *ctx)
{
	berm_dns_unredirect(ctx, 0);
	berm_inject_unredirect(ctx, 0);
	return 1;
}

/* The same for IPv6 sockets (IPv4 destinations of dual-stack ones as IPv4-mapped). */
SEC("cgroup/getpeername6")
int berm_dns_getpeername6(struct bpf_sock_addr *ctx)
{
	berm_dns_unredirect(ctx, 1);
	berm_inject_unredirect(ctx, 1);
	return 1;
}
