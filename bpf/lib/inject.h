/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * Injected credentials, the kernel half (included by netpolicy.bpf.c; agent/inject is the
 * other): a registered call's TCP connect to an address and port its resolver answered for an
 * injected credential's host goes to the call's own port of berm's injecting egress on
 * loopback. The tool cannot opt out: no proxy variable, raw socket option or address it
 * chooses changes where the kernel sends the connect. The destination the tool named is kept
 * per socket cookie for the egress to read (it finds the tool's socket's cookie by its
 * 4-tuple, sock_diag), with the call's cgroup as the kernel saw it.
 */
#ifndef BERM_INJECT_H
#define BERM_INJECT_H

#include "berm.h"

/* (call cgroup id, address, port) -> the call's proxy port */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 14);
	__type(key, struct berm_inject_key);
	__type(value, __u32);
} berm_inject_dsts SEC(".maps");

/* call cgroup id -> the call's proxy port: a call with injected credentials, whose every
 * other TCP connect the policy lets through goes to its egress too, to be inspected */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 12);
	__type(key, __u64);
	__type(value, __u32);
} berm_inject_calls SEC(".maps");

/* socket cookie -> where its moved connect was going */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);
	__type(value, struct berm_inject_orig);
} berm_inject_orig SEC(".maps");

/*
 * Move a TCP connect to the call's proxy port on loopback: 1 when ctx was rewritten, -1 when
 * where it was going could not be kept (refused). addr is the destination as the policy keys it (IPv4 as IPv4-mapped); v6 says
 * which hook runs (a dual-stack socket's IPv4-mapped destination is moved to the mapped
 * loopback, which its socket can reach).
 */
static __always_inline int berm_inject_move(struct bpf_sock_addr *ctx, __u64 cgid, const __u8 *addr, __u16 port, int v6,
					    __u32 proxy_port, __u16 flags)
{
	struct berm_inject_orig o = {.cgroup_id = cgid, .port = port, .proxy_port = (__u16)proxy_port, .flags = flags};
	__builtin_memcpy(o.addr, addr, sizeof(o.addr));
	__u64 cookie = bpf_get_socket_cookie(ctx);
	if (bpf_map_update_elem(&berm_inject_orig, &cookie, &o, BPF_ANY))
		return -1; /* the egress could not tell where it was going: refused */
	if (v6) {
		int mapped = addr[10] == 0xff && addr[11] == 0xff;
		for (int i = 0; i < 10; i++)
			mapped &= addr[i] == 0;
		if (mapped) {
			ctx->user_ip6[0] = 0;
			ctx->user_ip6[1] = 0;
			ctx->user_ip6[2] = bpf_htonl(0xffff);
			ctx->user_ip6[3] = bpf_htonl(0x7f000001);
		} else {
			ctx->user_ip6[0] = 0;
			ctx->user_ip6[1] = 0;
			ctx->user_ip6[2] = 0;
			ctx->user_ip6[3] = bpf_htonl(1);
		}
	} else {
		ctx->user_ip4 = bpf_htonl(0x7f000001);
	}
	ctx->user_port = bpf_htons((__u16)proxy_port);
	return 1;
}

/*
 * The call's proxy port if it has injected credentials (0: none). One lookup per TCP connect,
 * as before any credential host's: a call without injection pays nothing more.
 */
static __always_inline __u32 berm_inject_port(__u64 cgid)
{
	__u32 *p = bpf_map_lookup_elem(&berm_inject_calls, &cgid);
	return p ? *p : 0;
}

/* A TCP connect to an injected credential's host goes to the call's proxy (see berm_inject_move). */
static __always_inline int berm_inject_redirect(struct bpf_sock_addr *ctx, __u64 cgid, const __u8 *addr, __u16 port, int v6)
{
	struct berm_inject_key k = {.cgroup_id = cgid, .port = port};
	__builtin_memcpy(k.addr, addr, sizeof(k.addr));
	__u32 *proxy = bpf_map_lookup_elem(&berm_inject_dsts, &k);
	if (!proxy)
		return 0;
	return berm_inject_move(ctx, cgid, addr, port, v6, *proxy, 0);
}

/* getpeername of a moved socket shows the destination the tool named, not berm's egress. */
static __always_inline void berm_inject_unredirect(struct bpf_sock_addr *ctx, int v6)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct berm_inject_orig *o = bpf_map_lookup_elem(&berm_inject_orig, &cookie);
	if (!o || bpf_htons(o->proxy_port) != ctx->user_port)
		return;
	__u32 w[4];
	__builtin_memcpy(w, o->addr, sizeof(w));
	if (v6) {
		ctx->user_ip6[0] = w[0];
		ctx->user_ip6[1] = w[1];
		ctx->user_ip6[2] = w[2];
		ctx->user_ip6[3] = w[3];
	} else {
		ctx->user_ip4 = w[3];
	}
	ctx->user_port = bpf_htons(o->port);
}

#endif /* BERM_INJECT_H */
