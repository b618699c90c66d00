// berm-stage: the tool's stage, the last process berm runs in a call before the tool. The
// sandbox init starts it in the call's user namespace as the call's own ids; it confines
// itself as the tool will be (the terminal, the working directory, no_new_privs, Landlock,
// the seccomp programs) and executes the tool in its place.
//
// In C, single-threaded and with next to no memory, because its exec is on every call's
// critical path: a Go process's exec first stops its other threads and drops its runtime's
// memory (half a millisecond, measured), this one's costs the exec alone. It decides nothing:
// every rule, program and path comes computed from the init (sandboxinit/stageconfig.go is the
// format's definition; its test runs this binary's --dump against it).
//
// Protocol, on fd 3 (a stream socket): the configuration (u32 length, then the body; the
// tool's stdin travels with it as SCM_RIGHTS), then one byte 'S' when the call's root is
// complete. fd 4 gets 'u' at once, then, should the tool not start, a JSON object
// {"code":N,"error":"..."}; it is close-on-exec, so nothing more arrives once the tool runs.
// With approvals, the seccomp listener goes back on fd 3 (one byte 'L' with SCM_RIGHTS).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../internal/cshared/errstr.h"

// stageconfig.go's constants (the Go side is their definition; its test checks them here).
// STAGE_MAGIC is "BST1" read as a little-endian u32.
#define STAGE_MAGIC 0x31545342u
#define FLAG_TERMINAL 1u
#define FLAG_TERM_STDOUT 2u
#define FLAG_TERM_STDERR 4u
#define FLAG_LANDLOCK 8u
#define MAX_CONFIG (64u << 20)
#define STAGE_UP 'u'
#define STAGE_START 'S'
#define STAGE_LISTENER 'L'

// Kernel ABI not in every libc's headers (Landlock's network rules are Linux 6.7).
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor has received a
// notification, only a fatal signal ends the wait. Without it any signal interrupts the held
// syscall, which restarts as a new request: a tool could turn one pending approval into a
// stream of them.
#define SECCOMP_WAIT_KILLABLE_RECV (1u << 5)
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#define RESOLVE_NO_SYMLINKS_ 0x04

struct ll_ruleset_attr {
	uint64_t fs, net, scoped;
};
struct ll_path_beneath {
	uint64_t allowed;
	int32_t parent_fd;
} __attribute__((packed));
struct ll_net_port {
	uint64_t allowed, port;
};
struct open_how_ {
	uint64_t flags, mode, resolve;
};

extern char **environ;

// fail reports why the tool did not start, as JSON on fd 4, and exits with code.
static void fail(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void fail(int code, const char *fmt, ...) {
	char msg[4096], out[8192 + 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	size_t n = (size_t)snprintf(out, sizeof out, "{\"code\":%d,\"error\":\"", code);
	for (const unsigned char *p = (const unsigned char *)msg; *p && n < sizeof out - 16; p++) {
		if (*p == '"' || *p == '\\') {
			out[n++] = '\\', out[n++] = (char)*p;
		} else if (*p < 0x20) {
			n += (size_t)snprintf(out + n, sizeof out - n, "\\u%04x", *p);
		} else {
			out[n++] = (char)*p;
		}
	}
	n += (size_t)snprintf(out + n, sizeof out - n, "\"}\n");
	for (size_t w = 0; w < n;) {
		ssize_t r = write(4, out + w, n - w);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) break;
		w += (size_t)r;
	}
	_exit(code);
}

// The configuration, as read: the body and a cursor over it.
static unsigned char *body;
static uint32_t body_len, off;

static void need(uint32_t n) {
	if (n > body_len - off) fail(125, "read the tool's configuration: cut short at byte %u", off);
}
static uint32_t u32(void) {
	need(4);
	uint32_t v;
	memcpy(&v, body + off, 4); // little-endian host (amd64, arm64), as the init
	off += 4;
	return v;
}
static uint64_t u64(void) {
	need(8);
	uint64_t v;
	memcpy(&v, body + off, 8);
	off += 8;
	return v;
}
static char *str(void) {
	uint32_t n = u32();
	need(n);
	char *s = malloc((size_t)n + 1);
	if (!s) fail(125, "read the tool's configuration: %s", errstr(ENOMEM));
	memcpy(s, body + off, n);
	s[n] = 0;
	if (strlen(s) != n) fail(125, "read the tool's configuration: a string with a NUL byte at byte %u", off);
	off += n;
	return s;
}
static char **strs(void) {
	uint32_t n = u32();
	if (n > body_len / 4) fail(125, "read the tool's configuration: %u strings in %u bytes", n, body_len);
	char **v = calloc((size_t)n + 1, sizeof *v);
	if (!v) fail(125, "read the tool's configuration: %s", errstr(ENOMEM));
	for (uint32_t i = 0; i < n; i++) v[i] = str();
	return v;
}
static struct sock_fprog prog(void) {
	uint32_t n = u32();
	if (n > 0xffff) fail(125, "read the tool's configuration: a seccomp program of %u instructions", n);
	need(n * 8);
	struct sock_fprog p = {.len = (unsigned short)n, .filter = NULL};
	if (n) {
		p.filter = malloc((size_t)n * sizeof(struct sock_filter));
		if (!p.filter) fail(125, "read the tool's configuration: %s", errstr(ENOMEM));
		memcpy(p.filter, body + off, (size_t)n * 8);
		off += n * 8;
	}
	return p;
}

// read_config reads the configuration and the tool's stdin, which comes with its first bytes.
static int read_config(void) {
	uint32_t len;
	int fd = -1;
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = {.iov_base = &len, .iov_len = 4};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t r;
	while ((r = recvmsg(3, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL)) < 0 && errno == EINTR) {
	}
	int files = 0;
	for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
		int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < n; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
			if (files++ == 0) fd = f;
			else close(f);
		}
	}
	if (r != 4 || files != 1)
		fail(125, "read the tool's configuration (%d files): %s", files, r < 0 ? errstr(errno) : r == 0 ? "EOF" : "unexpected EOF");
	if (len > MAX_CONFIG) fail(125, "read the tool's configuration: %u bytes", len);
	body = malloc(len ? len : 1);
	if (!body) fail(125, "read the tool's configuration: %s", errstr(ENOMEM));
	for (uint32_t got = 0; got < len;) {
		r = read(3, body + got, len - got);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) fail(125, "read the tool's configuration (1 files): %s", r < 0 ? errstr(errno) : "unexpected EOF");
		got += (uint32_t)r;
	}
	body_len = len;
	return fd;
}

static void landlock(uint64_t fs, uint64_t net, uint64_t scoped) {
	if (!fs && !net && !scoped) fail(125, "landlock: empty ruleset: nothing handled");
	struct ll_ruleset_attr attr = {fs, net, scoped};
	// Older kernels reject a larger struct whose tail they do not know, even when it is zero.
	size_t size = scoped ? 24 : net ? 16 : 8;
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0)
		fail(125, "landlock: create ruleset (fs %#llx net %#llx scoped %#llx): %s", (unsigned long long)fs,
		     (unsigned long long)net, (unsigned long long)scoped, errstr(errno));
	uint32_t paths = u32();
	for (uint32_t i = 0; i < paths; i++) {
		uint64_t access = u64();
		char *path = str();
		struct open_how_ how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS_};
		int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
		if (fd < 0 && errno == ENOENT) {
			// Removed since the policy was compiled: no rule, which grants less, never more.
			free(path);
			continue;
		}
		if (fd < 0) fail(125, "landlock: open rule path %s: %s", path, errstr(errno));
		struct ll_path_beneath pb = {.allowed = access, .parent_fd = fd};
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
			fail(125, "landlock: add rule %s (access %#llx): %s", path, (unsigned long long)access, errstr(errno));
		close(fd);
		free(path);
	}
	uint32_t ports = u32();
	for (uint32_t i = 0; i < ports; i++) {
		struct ll_net_port np = {.allowed = u64()};
		np.port = u32();
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) < 0)
			fail(125, "landlock: add port rule %llu: %s", (unsigned long long)np.port, errstr(errno));
	}
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0) fail(125, "landlock: restrict self: %s", errstr(errno));
	close(rs);
}

// look_path finds name in the call's PATH as the Go stage did (exec.LookPath's rule: a
// regular file with an execute bit; a name with a slash is taken as it is).
static char *look_path(const char *name, char **env) {
	if (strchr(name, '/')) return (char *)name;
	const char *path = "";
	for (char **e = env; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':'), *dend = end;
		while (dend - p > 1 && dend[-1] == '/') dend--; // filepath.Join's "/usr/bin/" + "sh"
		char buf[8192];
		int n = end == p ? snprintf(buf, sizeof buf, "%s", name)
			: dend - p == 1 && *p == '/' ? snprintf(buf, sizeof buf, "/%s", name)
			: snprintf(buf, sizeof buf, "%.*s/%s", (int)(dend - p), p, name);
		struct stat st;
		if (n > 0 && (size_t)n < sizeof buf && stat(buf, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
			return strdup(buf);
		}
		if (!*end) break;
		p = end;
	}
	fail(127, "exec: %s: not found in the call's PATH", name);
}

static void install(struct sock_fprog *p, unsigned flags, const char *what) {
	long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, p);
	if (r < 0) fail(125, "%s: install filter of %u instructions: %s", what, p->len, errstr(errno));
}

// dump prints what it read, for stageconfig.go's test: the format has one definition.
static void dump(uint32_t flags, const char *dir, char **argv, char **env) {
	printf("flags %u\ndir %s\n", flags, dir);
	for (char **a = argv; *a; a++) printf("arg %s\n", *a);
	for (char **e = env; *e; e++) printf("env %s\n", *e);
}

// userns_holder is --userns: bermd's maker of the user namespaces of idmapped workspaces
// (sandboxer/workspace.go, mappingUserns). It unshares a new user namespace, says 'r' on
// stdout and holds the namespace until stdin ends; bermd writes its maps and opens it
// meanwhile. bermd executes it (a vfork) rather than forking itself into a new namespace: Go
// cannot vfork for CLONE_NEWUSER, so that fork copied all of bermd's mappings for every warm
// sandbox, holding the lock every other start of bermd waits on.
static int userns_holder(void) {
	if (unshare(CLONE_NEWUSER) != 0) return 125;
	char r = 'r', b;
	if (write(1, &r, 1) != 1) return 125;
	while (read(0, &b, 1) > 0) {
	}
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 2 && strcmp(argv[1], "--userns") == 0) return userns_holder();
	int dumping = argc == 2 && strcmp(argv[1], "--dump") == 0;
	// Nothing but stdio, the channel and the failure pipe goes on to the tool (the init may
	// have passed this binary itself as fd 5, to be executed through it).
	syscall(SYS_close_range, 5, ~0u, 0);
	if (!dumping) {
		fcntl(4, F_SETFD, FD_CLOEXEC);
		char up = STAGE_UP;
		if (write(4, &up, 1) != 1) return 125;
	}
	int stdin_fd = read_config();
	if (u32() != STAGE_MAGIC) fail(125, "read the tool's configuration: not a stage configuration (berm-stage and berm-init from different versions?)");
	uint32_t flags = u32();
	char *dir = str();
	char **tool_argv = strs();
	char **tool_env = strs();
	if (!tool_argv[0]) fail(125, "read the tool's configuration: no argv");
	if (dumping) {
		dump(flags, dir, tool_argv, tool_env);
		if (flags & FLAG_LANDLOCK) {
			uint64_t fs = u64(), net = u64(), scoped = u64();
			printf("landlock %llu %llu %llu\n", (unsigned long long)fs, (unsigned long long)net, (unsigned long long)scoped);
			for (uint32_t i = 0, n = u32(); i < n; i++) {
				uint64_t a = u64();
				char *p = str();
				printf("path %llu %s\n", (unsigned long long)a, p);
			}
			for (uint32_t i = 0, n = u32(); i < n; i++) {
				uint64_t a = u64();
				printf("port %llu %u\n", (unsigned long long)a, u32());
			}
		}
		for (int i = 0; i < 3; i++) {
			struct sock_fprog p = prog();
			printf("prog %d", p.len);
			for (int j = 0; j < p.len; j++)
				printf(" %u:%u:%u:%u", p.filter[j].code, p.filter[j].jt, p.filter[j].jf, p.filter[j].k);
			printf("\n");
		}
		printf("end %d\n", off == body_len);
		return 0;
	}

	// Nothing of the configuration is used before the init says the call's root is complete:
	// the workspace, /tmp and the Landlock rules' paths are the call's only from then on.
	char go;
	ssize_t r;
	while ((r = read(3, &go, 1)) < 0 && errno == EINTR) {
	}
	if (r != 1 || go != STAGE_START)
		fail(125, "wait for the launcher's start (0 files): %s", r < 0 ? errstr(errno) : r == 0 ? "EOF" : "unexpected frame");

	if (dup3(stdin_fd, 0, 0) < 0) fail(125, "the tool's stdin: %s", errstr(errno));
	close(stdin_fd);
	if (flags & FLAG_TERMINAL) {
		// The call's pty is the tool's controlling terminal (the stage leads its own
		// session): Ctrl-C typed by the user is SIGINT for the tool's foreground process
		// group, from the pty's line discipline.
		if (ioctl(0, TIOCSCTTY, 0) < 0) fail(125, "the pty as controlling terminal: %s", errstr(errno));
		if ((flags & FLAG_TERM_STDOUT) && dup3(0, 1, 0) < 0) fail(125, "the pty as fd 1: %s", errstr(errno));
		if ((flags & FLAG_TERM_STDERR) && dup3(0, 2, 0) < 0) fail(125, "the pty as fd 2: %s", errstr(errno));
	}
	if (chdir(dir) < 0) fail(126, "chdir %s: %s", dir, errstr(errno));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(125, "no_new_privs: %s", errstr(errno));
	if (flags & FLAG_LANDLOCK) {
		uint64_t fs = u64(), net = u64(), scoped = u64();
		landlock(fs, net, scoped);
	}
	char *path = look_path(tool_argv[0], tool_env);
	struct sock_fprog tool = prog(), setid = prog(), approvals = prog();
	if (off != body_len) fail(125, "read the tool's configuration: %u bytes past its end", body_len - off);
	if (tool.len) install(&tool, 0, "seccomp");
	install(&setid, 0, "seccomp (no setuid or setgid files)");
	if (approvals.len) {
		// Last: from here every gated syscall, the exec included, waits for the supervisor.
		// The listener leaves before the tool runs: a tool holding it could answer its own
		// requests.
		long l = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_WAIT_KILLABLE_RECV, &approvals);
		if (l < 0) fail(125, "seccomp (approvals): install filter with a listener: %s", errstr(errno));
		int lfd = (int)l;
		char cbuf[CMSG_SPACE(sizeof lfd)];
		memset(cbuf, 0, sizeof cbuf);
		char tag = STAGE_LISTENER;
		struct iovec iov = {.iov_base = &tag, .iov_len = 1};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET, cm->cmsg_type = SCM_RIGHTS, cm->cmsg_len = CMSG_LEN(sizeof lfd);
		memcpy(CMSG_DATA(cm), &lfd, sizeof lfd);
		while ((r = sendmsg(3, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
		}
		if (r != 1) fail(125, "send the approval listener: %s", r < 0 ? errstr(errno) : "short write");
		close(lfd);
	}
	close(3);
	execve(path, tool_argv, tool_env);
	fail(126, "fork/exec %s: %s", path, errstr(errno));
}
