/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * Domain egress, the kernel half (included by netpolicy.bpf.c; the agent's resolver,
 * agent/dnsguard, is the other): a registered call's port-53 traffic, UDP and TCP, is sent to
 * the call's own port of berm's resolver on loopback whatever address the tool names, and the
 * addresses that resolver answered for the call open the ports of the domain rule they were
 * answered for, until their expiry. Kept apart from the CIDR policy's maps: a pin is per call
 * (keyed by its cgroup), never per policy version, and outlives a hot reload.
 */
#ifndef BERM_DNSPIN_H
#define BERM_DNSPIN_H

#include "berm.h"

#define BERM_DNS_PORT 53

/* call cgroup id -> its resolver port: present for every call whose DNS berm answers */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u64);
	__type(value, struct berm_dns_call);
} berm_dns_calls SEC(".maps");

/* resolver port -> the call it answers for: no other call may reach it (dnspin.h foreign) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BERM_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} berm_dns_ports SEC(".maps");

/* (call cgroup id, address) -> the domain rules' ports open there and until when */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct berm_dns_pin_key);
	__type(value, struct berm_dns_pin);
} berm_dns_pins SEC(".maps");

/* socket cookie -> the address its last redirected query named (for the reply's source) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, __u64);
	__type(value, struct berm_dns_orig);
} berm_dns_orig SEC(".maps");

/*
 * Port 53 of a call berm resolves for goes to the call's resolver port: 1 when ctx was
 * rewritten (the destination is berm's, nothing else to judge). v6 is the address as the IPv6
 * hooks see it (IPv4-mapped on a dual-stack socket), 0 for the IPv4 hooks.
 */
static __always_inline int berm_dns_redirect(struct bpf_sock_addr *ctx, __u64 cgid, __u16 port, int v6)
{
	if (port != BERM_DNS_PORT) /* host order, read once by the caller (ctx is read whole-field only) */
		return 0;
	struct berm_dns_call *d = bpf_map_lookup_elem(&berm_dns_calls, &cgid);
	if (!d)
		return 0;
	struct berm_dns_orig o = {.port = bpf_htons(BERM_DNS_PORT), .resolver_port = bpf_htons(d->port)};
	if (v6) {
		__u32 w[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
		__builtin_memcpy(o.addr, w, sizeof(w));
		o.family = AF_INET6;
	} else {
		__u32 ip4 = ctx->user_ip4;
		__builtin_memcpy(o.addr, &ip4, 4);
		o.family = AF_INET;
	}
	__u64 cookie = bpf_get_socket_cookie(ctx);
	bpf_map_update_elem(&berm_dns_orig, &cookie, &o, BPF_ANY);
	if (v6) {
		__u32 w[4];
		__builtin_memcpy(w, d->resolver_ip6, sizeof(w));
		ctx->user_ip6[0] = w[0];
		ctx->user_ip6[1] = w[1];
		ctx->user_ip6[2] = w[2];
		ctx->user_ip6[3] = w[3];
	} else {
		ctx->user_ip4 = d->resolver_ip4;
	}
	ctx->user_port = bpf_htons(d->port);
	return 1;
}

/*
 * A destination that is another call's resolver port on this host (loopback, or the
 * unspecified address the kernel sends to loopback): refused whatever the rules say, or a
 * tool could make its neighbour's resolver pin addresses and record queries in its name.
 */
static __always_inline int berm_dns_foreign(__u64 cgid, const __u8 *addr, __u16 port)
{
	__u32 k = port;
	__u64 *owner = bpf_map_lookup_elem(&berm_dns_ports, &k);
	if (!owner || *owner == cgid)
		return 0;
	int zero10 = 1;
	for (int i = 0; i < 10; i++)
		zero10 &= addr[i] == 0;
	if (!zero10)
		return 0;
	if (addr[10] == 0xff && addr[11] == 0xff) /* IPv4: 127/8, 0.0.0.0 */
		return addr[12] == 127 || (addr[12] | addr[13] | addr[14] | addr[15]) == 0;
	if (addr[10] | addr[11] | addr[12] | addr[13] | addr[14])
		return 0;
	return addr[15] <= 1; /* ::1, :: */
}

/* Whether addr:port/proto is open for the call by an unexpired pin; *rule is its domain rule. */
static __always_inline int berm_dns_pinned(__u64 cgid, const __u8 *addr, __u16 port, __u8 proto, __u32 *rule)
{
	struct berm_dns_pin_key k = {.cgroup_id = cgid};
	__builtin_memcpy(k.addr, addr, sizeof(k.addr));
	struct berm_dns_pin *p = bpf_map_lookup_elem(&berm_dns_pins, &k);
	if (!p)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	for (__u32 i = 0; i < BERM_DNS_PIN_RULES; i++) {
		if (i >= p->n)
			break;
		struct berm_dns_pin_rule *r = &p->r[i];
		if (r->proto == proto && port >= r->port_lo && port <= r->port_hi && now < r->expires_ns) {
			*rule = r->rule;
			return 1;
		}
	}
	return 0;
}

/*
 * A reply read from a socket whose query was redirected: its source becomes the address the
 * query named, or stub resolvers (glibc, musl, Go's) drop it as coming from a stranger.
 */
static __always_inline void berm_dns_unredirect(struct bpf_sock_addr *ctx, int v6)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct berm_dns_orig *o = bpf_map_lookup_elem(&berm_dns_orig, &cookie);
	if (!o || o->resolver_port != ctx->user_port)
		return;
	if (v6) {
		__u32 w[4];
		if (o->family == AF_INET6) {
			__builtin_memcpy(w, o->addr, sizeof(w));
		} else {
			w[0] = 0;
			w[1] = 0;
			w[2] = bpf_htonl(0xffff);
			__builtin_memcpy(&w[3], o->addr, 4);
		}
		ctx->user_ip6[0] = w[0];
		ctx->user_ip6[1] = w[1];
		ctx->user_ip6[2] = w[2];
		ctx->user_ip6[3] = w[3];
	} else {
		if (o->family != AF_INET)
			return;
		__u32 ip4;
		__builtin_memcpy(&ip4, o->addr, 4);
		ctx->user_ip4 = ip4;
	}
	ctx->user_port = o->port;
}

#endif /* BERM_DNSPIN_H */
