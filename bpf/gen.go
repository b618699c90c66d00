// Package bpf holds berm's eBPF programs and their generated Go loaders.
//
// The C sources are the single source of truth for the kernel/user wire contract
// (lib/berm.h). bpf2go generates the Go mirror of each contract type once, from
// contract.bpf.c, as WireBerm* (WireBermExec is struct berm_exec); the objects that run are
// generated without types of their own. The generated .go and .o files are committed so that
// building berm needs no clang; `make generate` regenerates them.
package bpf

//go:generate go tool bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" -no-global-types -type berm_op -type berm_source -type berm_str -type berm_call_cfg -type berm_hdr -type berm_exec -type berm_exec_env -type berm_fork -type berm_exit -type berm_open -type berm_connect -type berm_syscall -type berm_syscall_path -type berm_kobj -type berm_changed -type berm_syscounts -type berm_aggmask -type berm_aggcounts -type berm_kaddr -type berm_net_deny -type berm_lsm_deny -type berm_lsm_right -type berm_lsm_key -type berm_lsm_rule -type berm_net_key -type berm_net_entry -type berm_net_prefix -type berm_sock_rule -type berm_net_socks -type berm_net_gen -type berm_dns_call -type berm_dns_pin_key -type berm_dns_pin_rule -type berm_dns_pin -type berm_dns_orig -type berm_inject_key -type berm_inject_orig -type berm_xg_gate_key -type berm_xg_allow_key -type berm_xg_allow -type berm_xg_reason -type berm_exec_deny -type berm_vital_args -type berm_drops -output-stem contract Wire contract.bpf.c -- -I.
//go:generate go tool bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" -no-global-types -output-stem process Process process.bpf.c -- -I.
//go:generate go tool bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" -no-global-types -output-stem syscalls Syscalls syscalls.bpf.c -- -I.
//go:generate go tool bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" -no-global-types -output-stem netpolicy Netpolicy netpolicy.bpf.c -- -I.
//go:generate go tool bpf2go -tags linux -target amd64 -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86" -no-global-types -output-stem lsm Lsm lsm.bpf.c -- -I.
