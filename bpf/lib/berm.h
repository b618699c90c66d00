/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Copyright berm authors. */
/*
 * The wire contract between the kernel programs and the Go agent. This header is the only
 * definition: bpf2go generates the Go mirror types from it once (contract.bpf.c, as
 * bpf.WireBerm*), every loader and decoder uses those, and agent/contract_test.go checks the
 * decoders and the Go limits against this file, so the two sides cannot drift apart.
 */
#ifndef BERM_H
#define BERM_H

#define BERM_MAX_SLOTS 256    /* concurrent sandboxed calls per node */
#define BERM_MAX_SYSCALLS 512 /* syscall numbers counted per call (x86-64 uses < 460) */
#define BERM_PATH_LEN 256     /* fixed path fields (LSM denials) */
#define BERM_PATH_MAX 4096    /* paths in variable records: PATH_MAX, the kernel refuses longer */
#define BERM_ARGS_MAX 8192    /* argv bytes an exec record carries */
#define BERM_EXE_PATH_MAX 1024 /* bytes of the executed file's kernel path an exec record carries */
#define BERM_ENV_MAX 8192     /* environment bytes an exec_env record carries (scanned, never recorded) */
#define BERM_COMM_LEN 16

enum berm_op {
	BERM_OP_EXEC = 1,
	BERM_OP_FORK = 2,
	BERM_OP_EXIT = 3,
	BERM_OP_OPEN = 4,
	BERM_OP_CONNECT = 5,
	BERM_OP_SYSCALL = 6,
	BERM_OP_NET_DENY = 7, /* struct berm_net_deny: the cgroup sock hooks (netpolicy.bpf.c) */
	BERM_OP_SYSCALL_PATH = 8,
	BERM_OP_LSM_DENY = 9, /* struct berm_lsm_deny: the BPF LSM hooks (lsm.bpf.c) */
	BERM_OP_EXEC_ENV = 10, /* struct berm_exec_env: an exec's environment, just before its exec record */
	BERM_OP_EXEC_DENY = 11, /* struct berm_exec_deny: a gated exec killed (lib/execgate.h) */
};

/*
 * What an incident is made of. A record is vital when it is an exec (and the environment that
 * comes with it), a connect, a denial by any layer, a destructive operation that worked (a
 * path syscall: unlink, rename, chmod, mount, ...; an open for writing), or any refusal
 * (EPERM, EACCES); everything else (failed opens of files not there, reads, path-less
 * syscalls that worked, forks and exits) is noise. Noise never takes the ring's last quarter
 * (lib/maps.h), and the agent's queue keeps a share for vital records likewise: this is the
 * one classification, agent/vital.go applies it to a record read from the ring, and
 * agent/vital_test.go runs both over every op, result and flag class and checks they agree.
 */
#define BERM_EPERM 1
#define BERM_EACCES 13
#define BERM_O_WRITE 01103 /* O_WRONLY | O_RDWR | O_CREAT | O_TRUNC */

static __always_inline int berm_refused(__s64 ret)
{
	return ret == -BERM_EPERM || ret == -BERM_EACCES;
}

/* Whether a record of op, with its result ret (an open's: its flags), is vital. */
static __always_inline int berm_vital(__u32 op, __s64 ret, __u32 flags)
{
	switch (op) {
	case BERM_OP_EXEC:
	case BERM_OP_EXEC_ENV:
	case BERM_OP_EXEC_DENY:
	case BERM_OP_CONNECT:
	case BERM_OP_NET_DENY:
	case BERM_OP_LSM_DENY:
		return 1;
	case BERM_OP_OPEN:
		if (ret < 0)
			return berm_refused(ret);
		return (flags & BERM_O_WRITE) != 0;
	case BERM_OP_SYSCALL_PATH:
		return ret >= 0 || berm_refused(ret);
	case BERM_OP_SYSCALL:
		return berm_refused(ret);
	}
	return 0;
}

/* A record to classify (berm_vital_of, contract.bpf.c): the classification's test input. */
struct berm_vital_args {
	__s64 ret;
	__u32 op;
	__u32 flags;
};

/* Records of a call lost in the kernel (berm_drops, per CPU), by class: noise dropped to keep
 * the ring's last quarter for vital records (or lost to a full ring), and vital records lost. */
struct berm_drops {
	__u64 vital;
	__u64 noise;
};

/* Per-call configuration, the value of berm_calls (key: cgroup v2 id). */
struct berm_call_cfg {
	__u32 slot;      /* index into the per-call counter arrays */
	__u32 flags;     /* BERM_CALL_* */
	__u64 sys_mask[BERM_MAX_SYSCALLS / 64]; /* syscalls that get an individual event */
	/* of those, the ones reported only when refused (EPERM): traced for a filter rule that
	 * refuses some of their calls (ioctl's TIOCSTI), not for the many it lets through */
	__u64 refused_mask[BERM_MAX_SYSCALLS / 64];
	__u32 init_tgid; /* the sandbox init: its set-up and its child's are berm's, not the tool's */
	__u32 pad;
	char init_exe[BERM_COMM_LEN]; /* the init binary's file name, as an exec of it is named */
	char stage_exe[BERM_COMM_LEN]; /* the tool's stage's (berm-stage): its exec is set-up too */
};

/* Every event starts with this header. */
struct berm_hdr {
	__u64 ts_ns;     /* bpf_ktime_get_boot_ns() */
	__u64 cgroup_id; /* cgroup v2 id of the call */
	__u32 slot;
	__u16 op;        /* enum berm_op */
	__u16 size;      /* size of the whole event in bytes */
	__u32 pid;       /* tgid */
	__u32 tid;
	__u32 ppid;      /* tgid of the real parent */
	__u32 uid;
	char comm[BERM_COMM_LEN];
};

/*
 * A string in the tail of a variable-size record: len bytes are in the record (no NUL), full
 * is its length where it came from. full != len: the string was cut, and the record says so;
 * full = BERM_LEN_UNKNOWN: cut at a length not known (a kernel path deeper than the walk went).
 */
#define BERM_LEN_UNKNOWN 0xffffffff
struct berm_str {
	__u32 len;
	__u32 full;
};

/* Where a recorded path or address came from. */
enum berm_source {
	BERM_SRC_NONE = 0,   /* not captured (no entry state: the trace started mid-syscall) */
	BERM_SRC_KERNEL = 1, /* the kernel's own object: the file behind an fd, a dentry walk */
	BERM_SRC_USER = 2,   /* the syscall's argument in user memory, read at syscall entry */
};

/*
 * The kernel's view of a syscall's object, as a BPF LSM hook saw it (lsm.bpf.c): the path the
 * kernel resolved, walked from the object's dentry up to the task's root, and the object's
 * device and inode. The hook runs inside the syscall, after the kernel read the path from user
 * memory and looked it up, so this is the object acted on whatever the tool's memory says
 * before or after. seen = 0: no hook saw it (no BPF LSM on this kernel, or a syscall no hook
 * serves); only the path read from user memory, and its reread at exit, are there then.
 */
struct berm_kobj {
	__u64 ino;       /* 0: no inode yet (an entry about to be made, a rename's free target) */
	__u32 dev;       /* the kernel's encoding, major << 20 | minor */
	__u32 seen;
	struct berm_str path; /* bytes in the record's tail, after the other strings */
};

/*
 * Variable-size records (exec, open, syscall_path) are the struct followed by the bytes of
 * their berm_str fields, in field order; hdr.size is the whole record.
 */
struct berm_exec {
	struct berm_hdr hdr;
	__u32 exe_mode;  /* i_mode of the executed file (setuid/setgid bits) */
	__u32 exe_nlink; /* 0: the file was deleted (or is a memfd) */
	__u32 euid;      /* effective uid after exec, as the kernel sees it (kuid in the initial user ns) */
	__u32 egid;      /* effective gid after exec, likewise */
	char exe_name[64]; /* dentry name of the executed file ("memfd:x" for memfds) */
	struct berm_str filename; /* as passed to execve */
	struct berm_str exe_path; /* the kernel's path of the executed file (dentry walk), at most BERM_EXE_PATH_MAX - 1 bytes */
	struct berm_str args;     /* NUL-separated argv */
};

/*
 * The new image's environment (NUL-separated NAME=value), emitted just before the exec record
 * of the same task (lib/execenv.h). The agent scans it for other calls' secrets and drops it:
 * it is never journalled. env.full > env.len: the environment was longer than
 * BERM_ENV_MAX - 1 bytes, and the rest was not scanned.
 */
struct berm_exec_env {
	struct berm_hdr hdr;
	struct berm_str env;
};

struct berm_fork {
	struct berm_hdr hdr;
	__u32 child_pid;
	__u32 child_tid;
};

struct berm_exit {
	struct berm_hdr hdr;
	__s32 code;      /* exit status (code << 8 | signal), as wait(2) sees it */
	__u32 thread_group_dead;
};

/*
 * path: for an open that yielded an fd, the kernel's path of the file behind it (source
 * KERNEL); otherwise the argument as read at syscall entry (source USER), and for a relative
 * one, base: the kernel's path of the directory it is relative to (dirfd's or the cwd).
 */
struct berm_open {
	struct berm_hdr hdr;
	__s64 ret;       /* fd or -errno */
	__s32 dirfd;
	__u32 flags;
	__u32 mode;
	__u32 nr;        /* open, openat, openat2 or creat */
	__u32 source;    /* enum berm_source of path */
	__u32 pad;
	struct berm_str path;
	struct berm_str base;
};

/*
 * An IPv4/IPv6 destination is the kernel's own copy as the cgroup connect hook saw it (source
 * KERNEL). Where that hook did not run (unix sockets; a socket already connecting; no network
 * layer), the address as read at syscall entry (source USER), before the call could block.
 */
struct berm_connect {
	struct berm_hdr hdr;
	__s64 ret;       /* 0 or -errno (-EINPROGRESS for non-blocking sockets) */
	__u16 family;
	__u16 port;      /* host byte order */
	__u32 addrlen;
	__u8 addr[16];   /* IPv4 in the first 4 bytes */
	char unix_path[108];
	__u32 source;    /* enum berm_source */
	__u32 pad;
};

/* A syscall of the call's traced set. */
struct berm_syscall {
	struct berm_hdr hdr;
	__s64 ret;
	__u64 args[6];
	__u32 nr;
	__u32 pad;
};

/*
 * A traced syscall that takes paths (unlink, rename, mkdir, chmod, mount, ...) or acts on an
 * fd's file (ftruncate, fallocate, fchmod, ...): the pointers alone mean nothing later, so the
 * strings are captured at entry, before the call can block and its memory be rewritten; an
 * fd's file is named by the kernel. A separate op keeps the common, path-less event small:
 * ring space and copy cost are per byte.
 */
struct berm_syscall_path {
	struct berm_syscall sc;
	__u32 source;    /* enum berm_source of path */
	__u32 source2;   /* and of path2 */
	struct berm_str path;
	struct berm_str path2;
	__u32 changed;   /* enum berm_changed: a user-memory path read again at exit differed */
	__u32 pad;
	struct berm_kobj kobj;  /* the kernel's view of path's object, where a BPF LSM hook saw it */
	struct berm_kobj kobj2; /* and of path2's (a rename's target) */
};

/*
 * A path read from user memory (source USER) is read again at the syscall's exit: if another
 * thread rewrote it while the kernel used it (or unmapped it), what was read at entry may not
 * be what the kernel acted on, and the record says so. A rewrite that put the entry's bytes
 * back before the exit is not seen: the flag is evidence of a race, not proof of its absence.
 */
enum berm_changed {
	BERM_CHANGED_PATH = 1,
	BERM_CHANGED_PATH2 = 2,
};

/* Per-call syscall counters: one value per slot, so reading a call's counts is one lookup. */
struct berm_syscounts {
	__u64 n[BERM_MAX_SYSCALLS];
};

/*
 * Counting in the kernel past a call's event budget. Once a call is past its budget and one of
 * its path-less traced syscalls keeps coming (the agent has aggregated many of them already),
 * the agent sets that syscall's bit in the call's slot of berm_aggmask: from then on the kernel
 * counts it in berm_aggcounts instead of emitting one record per syscall, and the agent adds
 * those counts to the call's aggregates at its end. A flood past its budget then costs the
 * agent nothing, and the record's totals stay exact. Refusals (-EPERM) are never counted here:
 * each is an event, judged as a denial.
 */
struct berm_aggmask {
	__u64 w[BERM_MAX_SYSCALLS / 64];
};

struct berm_aggcounts {
	__u64 n[BERM_MAX_SYSCALLS];      /* syscalls counted instead of reported */
	__u64 failed[BERM_MAX_SYSCALLS]; /* of those, the ones that returned an error */
};

/*
 * The destination a connect's cgroup hook saw (netpolicy.bpf.c): the kernel's own copy of the
 * sockaddr, after copy_from_user, the address the kernel acts on. Kept per thread (key: pid_tgid)
 * from the hook to the connect's exit, where the connect event takes it (source KERNEL).
 */
struct berm_kaddr {
	__u16 family;
	__u16 port;    /* host byte order */
	__u32 pad;
	__u8 addr[16]; /* IPv4 in the first 4 bytes */
};

/*
 * A denial (or, in audit mode, a would-be denial) by the cgroup sock hooks: a destination
 * (connect, unconnected send) or, with nr = BERM_NR_SOCKET, a socket() refused at creation.
 */
struct berm_net_deny {
	struct berm_hdr hdr;
	__u32 rule;      /* index of the rule that fired in the compiled policy, 0 = default deny */
	__u32 audit;     /* 1: audit mode, the action was allowed */
	__u32 nr;        /* BERM_NR_SOCKET for a refused socket(), else 0 */
	__u16 family;    /* address family */
	__u16 port;      /* host byte order */
	__u32 proto;     /* IP protocol; for socket(): type << 16 | protocol */
	__u32 pad;
	__u8 addr[16];   /* IPv6, IPv4 as IPv4-mapped */
};

/* A denial (or would-be denial) by the BPF LSM file policy: the object's path. */
struct berm_lsm_deny {
	struct berm_hdr hdr;
	__u32 rule;      /* 1-based index of the policy rule, 0 = no rule covers the object */
	__u32 audit;
	char path[BERM_PATH_LEN];
};

/*
 * Exec approvals (lib/execgate.h). The approval supervisor lets a held execve continue, so the
 * kernel copies path and argv again after the decision: the exec hook holds the exec to what
 * was decided. A call's gated programs are file identities (dev in the kernel's encoding,
 * major << 20 | minor); an exec of one needs a one-shot entry the supervisor wrote for the
 * thread (its id before the exec) with the file and the exact argv bytes it decided on.
 */
#define BERM_XG_ARGV_MAX 4096 /* argv bytes (NUL-terminated strings) an approval holds */
#define BERM_XG_MAX_GATES 4096 /* gated program identities of all calls together */
#define BERM_XG_MAX_ALLOWS 1024 /* one-shot exec approvals outstanding on the node */

struct berm_xg_gate_key {
	__u64 cgroup_id;
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct berm_xg_allow_key {
	__u64 cgroup_id;
	__u32 tid; /* the thread that called execve, as the kernel knew it before the exec */
	__u32 pad;
};

struct berm_xg_allow {
	__u64 ino;
	__u32 dev;
	__u32 len; /* bytes of argv used, at most BERM_XG_ARGV_MAX */
	__u8 argv[BERM_XG_ARGV_MAX];
};

/* Why the exec hook killed a gated exec. */
enum berm_xg_reason {
	BERM_XG_NO_APPROVAL = 1, /* a gated program with no decision for this thread */
	BERM_XG_OTHER_FILE = 2,  /* the file that runs is not the one decided on */
	BERM_XG_OTHER_ARGV = 3,  /* its argv is not the one decided on */
	BERM_XG_INTERP = 4,      /* a gated program reached as a script's interpreter */
};

/* A gated exec killed before its first instruction: the file that would have run. */
struct berm_exec_deny {
	struct berm_hdr hdr;
	__u32 reason; /* enum berm_xg_reason */
	__u32 dev;
	__u64 ino;
	char name[BERM_PATH_LEN]; /* the file's name (its dentry) */
};

/* BPF LSM file policy (bpf/lsm.bpf.c). A call's policy is a set of inodes, each with the rights
 * it grants to itself and everything beneath it; an access is judged by the nearest granted
 * inode on the way up from the object (already united with its granted ancestors' rights). */
#define BERM_LSM_MAX_RULES 16384 /* inode rules of all calls together */
#define BERM_LSM_DEPTH 32        /* dentries walked up from the object before giving up (deny) */

enum berm_lsm_right {
	BERM_LSM_READ = 1,   /* open for reading, list a directory */
	BERM_LSM_WRITE = 2,  /* open for writing, truncate, create entries in a directory */
	BERM_LSM_EXEC = 4,   /* execute a file (and map it as the interpreter) */
	BERM_LSM_REMOVE = 8, /* unlink, rmdir and rename entries of a directory */
};

/* Key of berm_lsm_rules: one inode of one call. dev is the kernel's encoding (major << 20 | minor). */
struct berm_lsm_key {
	__u64 cgroup_id;
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct berm_lsm_rule {
	__u32 rights; /* enum berm_lsm_right bits */
	__u32 rule;   /* 1-based index of the policy rule, reported in denials */
};

/*
 * Network enforcement (bpf/netpolicy.bpf.c): the per-call egress policy the agent compiles
 * (sandboxer/policy NetPolicy) in the form the cgroup sock hooks read.
 */
#ifndef BERM_CALL_AUDIT
#define BERM_CALL_AUDIT 1          /* berm_call_cfg.flags: record would-be denials, block nothing */
#endif
/* berm_call_cfg.flags: the tool has not started (no child of the init has executed anything
 * but the init's binary): syscalls are berm's set-up, not counted as the tool's */
#define BERM_CALL_SETUP 2
#define BERM_MAX_NET_ENTRIES 64    /* entries one prefix carries: policy.MaxNetEntries */
#define BERM_MAX_NET_PREFIXES 4096 /* prefixes of one call's policy (trie entries allocated on use) */
#define BERM_MAX_SOCK_RULES 16     /* socket(family, type) pairs one call may create */
#define BERM_NR_SOCKET 41          /* berm_net_deny.nr of a refused socket(): x86-64 __NR_socket */

#define BERM_NET_GEN_BITS 64        /* berm_net_key.prefixlen counts the generation first */

/*
 * LPM trie key: a policy version's generation, then every address as IPv6, IPv4 as
 * IPv4-mapped (::ffff:a.b.c.d). prefixlen = BERM_NET_GEN_BITS + the address prefix's length
 * (96+n for IPv4): the generation always matches whole, so versions never see each other's keys.
 */
struct berm_net_key {
	__u32 prefixlen;
	__u32 gen[2];    /* the generation's bytes in host order (a __u64 split for alignment) */
	__u8 addr[16];
};

/* One egress decision; proto 0 matches any protocol. */
struct berm_net_entry {
	__u16 port_lo;   /* host byte order, inclusive */
	__u16 port_hi;
	__u8 proto;      /* 0, IPPROTO_TCP or IPPROTO_UDP */
	__u8 allow;
	__u16 pad;
	__u32 rule;      /* rule id reported when this entry decides */
};

/* LPM trie value: the prefix's entries, its own then its ancestors', first match wins. */
struct berm_net_prefix {
	__u32 n;
	__u32 pad;
	struct berm_net_entry e[BERM_MAX_NET_ENTRIES];
};

struct berm_sock_rule {
	__u16 family;
	__u16 type;      /* 0: any type */
};

/*
 * Sockets a call may create. A refused socket() is reported with nr = BERM_NR_SOCKET,
 * family, and proto = type << 16 | protocol (no address, port 0).
 */
struct berm_net_socks {
	__u32 n;
	__u32 pad;
	struct berm_sock_rule r[BERM_MAX_SOCK_RULES];
};

/*
 * One version of one call's network policy, the value of berm_net_gens (key: its generation,
 * never reused). The generation a call's slot points to names the call's prefixes in the trie
 * and this record; the record names the cgroup it was installed for, so a slot's generation
 * never judges another cgroup.
 */
struct berm_net_gen {
	__u64 cgroup_id;
	struct berm_net_socks socks;
};

/*
 * Domain egress (bpf/lib/dnspin.h, in the netpolicy hooks): a call's DNS goes to berm's
 * resolver whatever address the tool names, and a `domain:` rule's ports open only at the
 * addresses the resolver answered for that call, until the answer's TTL (plus a grace) runs out.
 */
#define BERM_DNS_PIN_RULES 8 /* port ranges one pinned address carries (its domain rules') */

/* Value of berm_dns_calls (key: the call's cgroup id): where its port 53 goes. */
struct berm_dns_call {
	__u32 resolver_ip4;    /* network byte order (127.0.0.1) */
	__u16 port;            /* host byte order: the call's own resolver port, on both loopbacks */
	__u16 pad;
	__u8 resolver_ip6[16]; /* ::1 */
};

/* Key of berm_dns_pins: one resolved address of one call. */
struct berm_dns_pin_key {
	__u64 cgroup_id;
	__u8 addr[16];         /* IPv6, IPv4 as IPv4-mapped */
};

struct berm_dns_pin_rule {
	__u64 expires_ns;      /* bpf_ktime_get_ns (CLOCK_MONOTONIC) past which the pin is void */
	__u32 rule;            /* the domain rule's id, reported like a CIDR rule's */
	__u16 port_lo;         /* host byte order, inclusive */
	__u16 port_hi;
	__u8 proto;            /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[7];
};

struct berm_dns_pin {
	__u32 n;
	__u32 pad;
	struct berm_dns_pin_rule r[BERM_DNS_PIN_RULES];
};

/* Value of berm_dns_orig (key: socket cookie): the address a redirected query named, given
 * back as the reply's source so the tool's resolver library accepts the answer. */
struct berm_dns_orig {
	__u8 addr[16];         /* IPv4 in the first 4 bytes for family AF_INET */
	__u16 port;            /* network byte order */
	__u16 family;
	__u16 resolver_port;   /* network byte order: the call's resolver port it went to */
	__u16 pad;
};

/*
 * Injected credentials (bpf/lib/inject.h, in the netpolicy hooks): a call's TCP connects to the
 * addresses its resolver answered for an injected credential's hosts, on ports 443 and 80, go
 * to the call's own port of berm's injecting egress on loopback, whatever the tool does; every
 * other TCP connect the call's policy lets through goes there too, to be inspected for the
 * placeholder (BERM_INJECT_INSPECT).
 */

/* Key of berm_inject_dsts (value: the call's proxy port, host byte order). */
struct berm_inject_key {
	__u64 cgroup_id;
	__u8 addr[16];         /* IPv6, IPv4 as IPv4-mapped */
	__u16 port;            /* host byte order */
	__u8 pad[6];
};

/* Value of berm_inject_orig (key: the tool's socket cookie): where a moved connect was going,
 * as the kernel saw it. berm's egress reads it for the connection it accepts. */
struct berm_inject_orig {
	__u64 cgroup_id;       /* the call (its registered cgroup) that made the connect */
	__u8 addr[16];         /* IPv6, IPv4 as IPv4-mapped */
	__u16 port;            /* host byte order */
	__u16 proxy_port;      /* host byte order: the call's proxy port it went to */
	__u16 flags;           /* BERM_INJECT_INSPECT: not a credential host's, moved to be inspected */
	__u16 pad;
};

#ifndef BERM_INJECT_INSPECT
#define BERM_INJECT_INSPECT 1
#endif

#endif /* BERM_H */
