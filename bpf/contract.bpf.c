// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/* Copyright berm authors. */
/*
 * The wire contract (lib/berm.h) as one object: bpf2go generates the Go mirror of each
 * contract type once, from here (bpf.WireBerm*), and the objects that run are generated
 * without types of their own (-no-global-types), so every loader and decoder shares the one Go
 * type per C type. Its one program, berm_vital_of, is the contract's classification of records
 * (berm_vital) as the kernel runs it: agent/vital_test.go runs it (BPF_PROG_TEST_RUN) beside
 * the agent's and checks they agree. Nothing attaches it.
 */
#include "include/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/berm.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("syscall")
int berm_vital_of(struct berm_vital_args *a)
{
	return berm_vital(a->op, a->ret, a->flags);
}

/* Referenced so that the types are in this object's BTF. */
const enum berm_op *unused_op __attribute__((unused));
const enum berm_source *unused_source __attribute__((unused));
const struct berm_str *unused_str __attribute__((unused));
const struct berm_call_cfg *unused_call_cfg __attribute__((unused));
const struct berm_hdr *unused_hdr __attribute__((unused));
const struct berm_exec *unused_exec __attribute__((unused));
const struct berm_exec_env *unused_exec_env __attribute__((unused));
const struct berm_fork *unused_fork __attribute__((unused));
const struct berm_exit *unused_exit __attribute__((unused));
const struct berm_open *unused_open __attribute__((unused));
const struct berm_connect *unused_connect __attribute__((unused));
const struct berm_syscall *unused_syscall __attribute__((unused));
const struct berm_syscall_path *unused_syscall_path __attribute__((unused));
const struct berm_kobj *unused_kobj __attribute__((unused));
const enum berm_changed *unused_changed __attribute__((unused));
const struct berm_syscounts *unused_syscounts __attribute__((unused));
const struct berm_aggmask *unused_aggmask __attribute__((unused));
const struct berm_aggcounts *unused_aggcounts __attribute__((unused));
const struct berm_kaddr *unused_kaddr __attribute__((unused));
const struct berm_net_deny *unused_net_deny __attribute__((unused));
const struct berm_lsm_deny *unused_lsm_deny __attribute__((unused));
const enum berm_lsm_right *unused_lsm_right __attribute__((unused));
const struct berm_lsm_key *unused_lsm_key __attribute__((unused));
const struct berm_lsm_rule *unused_lsm_rule __attribute__((unused));
const struct berm_net_key *unused_net_key __attribute__((unused));
const struct berm_net_entry *unused_net_entry __attribute__((unused));
const struct berm_net_prefix *unused_net_prefix __attribute__((unused));
const struct berm_sock_rule *unused_sock_rule __attribute__((unused));
const struct berm_net_socks *unused_net_socks __attribute__((unused));
const struct berm_net_gen *unused_net_gen __attribute__((unused));
const struct berm_dns_call *unused_dns_call __attribute__((unused));
const struct berm_dns_pin_key *unused_dns_pin_key __attribute__((unused));
const struct berm_dns_pin_rule *unused_dns_pin_rule __attribute__((unused));
const struct berm_dns_pin *unused_dns_pin __attribute__((unused));
const struct berm_dns_orig *unused_dns_orig __attribute__((unused));
const struct berm_inject_key *unused_inject_key __attribute__((unused));
const struct berm_inject_orig *unused_inject_orig __attribute__((unused));
const struct berm_xg_gate_key *unused_xg_gate_key __attribute__((unused));
const struct berm_xg_allow_key *unused_xg_allow_key __attribute__((unused));
const struct berm_xg_allow *unused_xg_allow __attribute__((unused));
const enum berm_xg_reason *unused_xg_reason __attribute__((unused));
const struct berm_exec_deny *unused_exec_deny __attribute__((unused));
const struct berm_vital_args *unused_vital_args __attribute__((unused));
const struct berm_drops *unused_drops __attribute__((unused));
