// berm's front: `berm run` handed to a running bermd, in C, because it starts on every tool
// call and a Go program's start and exit alone cost more than the rest of a warm launch.
//
// It defines nothing of berm run: it sends bermd what it has (its arguments after "run", its
// environment, its working directory and stdio as descriptors: the bare invocation of
// sandboxer/callproto/invoke.go), and bermd reads them with berm run's own parser
// (cmd/internal/runcli.Invoke), resolves the call in the caller's context, launches it and
// answers with what to print, the exit status and the --summary bytes, which this process
// writes itself. Everything else is berm's Go front, berm-front beside this binary, executed
// with the same arguments: another command, a terminal on stdin
// (the pty relay), no bermd answering (started on demand, or the embedded agent), or a call
// bermd sends back (--daemon never, --state-dir, another bermd's --socket).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "../internal/cshared/errstr.h"

extern char **environ;

// callproto's constants (the Go side is their definition; callproto's tests read them here).
#define DEFAULT_SOCKET "/run/berm/bermd.sock"
#define INVOKE_MAGIC 'A'
#define MAX_INVOCATION (16u << 20)
#define FRAME_STDERR 'e'
#define FRAME_FALLBACK 'x'
#define FRAME_END 'f'

static char **g_argv;
static int g_sock = -1;

// go_front executes berm-front beside this binary with the same arguments.
static void go_front(void) {
	char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
	if (n < 0) {
		fprintf(stderr, "berm: find own binary: %s\n", errstr(errno));
		exit(1);
	}
	path[n] = 0;
	char *slash = strrchr(path, '/');
	strcpy(slash ? slash + 1 : path, "berm-front");
	if (g_sock >= 0) close(g_sock);
	execv(path, g_argv);
	fprintf(stderr, "berm: this command needs %s, installed beside berm (make build puts both in bin/): %s\n", path, errstr(errno));
	exit(1);
}

// on_signal passes SIGINT and SIGTERM on as the protocol's Interrupt (encoding/json's line).
static void on_signal(int sig) {
	static const char intr[] = "{\"signal\":\"interrupt\"}\n", term[] = "{\"signal\":\"terminated\"}\n";
	int saved = errno;
	if (sig == SIGINT) (void)!send(g_sock, intr, sizeof intr - 1, MSG_NOSIGNAL);
	else (void)!send(g_sock, term, sizeof term - 1, MSG_NOSIGNAL);
	errno = saved;
}

static int write_all(int fd, const char *b, size_t n, int sock) {
	while (n > 0) {
		ssize_t w = sock ? send(fd, b, n, MSG_NOSIGNAL) : write(fd, b, n);
		if (w < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		b += w, n -= (size_t)w;
	}
	return 0;
}

// Reading bermd's frames: got counts what was read, for Go's EOF / unexpected EOF.
static size_t got;

static int read_full(void *p, size_t n) {
	char *b = p;
	while (n > 0) {
		ssize_t r = read(g_sock, b, n);
		if (r < 0 && errno == EINTR) continue;
		if (r <= 0) return r == 0 ? -1 : -2;
		b += r, n -= (size_t)r, got += (size_t)r;
	}
	return 0;
}

static void no_reply(int rc, size_t before) {
	const char *why = rc == -2 ? errstr(errno) : got == before ? "EOF" : "unexpected EOF";
	fprintf(stderr, "berm: bermd ended the call without a reply: %s\n", why);
	exit(1);
}

// read_bytes reads a length-prefixed byte string (NUL-terminated for convenience).
static char *read_bytes(uint32_t *len, size_t before) {
	int rc = read_full(len, 4);
	if (rc) no_reply(rc, before);
	char *b = malloc((size_t)*len + 1);
	if (!b) {
		fprintf(stderr, "berm: bermd's reply: %s\n", errstr(ENOMEM));
		exit(1);
	}
	if ((rc = read_full(b, *len))) no_reply(rc, before);
	b[*len] = 0;
	return b;
}

static void put32(char *p, uint32_t v) { memcpy(p, &v, 4); } // little-endian host (amd64, arm64)

int main(int argc, char **argv) {
	g_argv = argv;
	struct termios t;
	if (argc < 3 || strcmp(argv[1], "run") != 0 || ioctl(0, TCGETS, &t) == 0)
		go_front();
	// A caller that is not root is bermd's to serve or refuse (bermd --access decides from
	// the connection's credentials); with no bermd answering, the Go front says run needs root.
	int root = geteuid() == 0;

	// Where bermd is: --socket as the flags say it, read only to find it (bermd parses the
	// flags and sends a call meant for another socket back to the Go front).
	const char *socket_path = DEFAULT_SOCKET;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) break;
		if (a[0] != '-') continue;
		a += a[1] == '-' ? 2 : 1;
		if (strncmp(a, "socket", 6) == 0) {
			if (a[6] == '=') socket_path = a + 7;
			else if (a[6] == 0 && i + 1 < argc) socket_path = argv[++i];
		}
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(socket_path) >= sizeof sa.sun_path) go_front();
	strcpy(sa.sun_path, socket_path);

	// Held shared until this process ends (and across the Go front's exec): a bermd started
	// on demand does not leave while its caller is about to reach it (callproto.CallerLock).
	char lock[PATH_MAX];
	snprintf(lock, sizeof lock, "%s.lock", socket_path);
	// A caller that is not root cannot open it (root's) and goes without: it cannot start a
	// bermd on demand either.
	int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
	if (lfd < 0 && root) go_front();
	int rc = 0;
	while (lfd >= 0 && (rc = flock(lfd, LOCK_SH)) < 0 && errno == EINTR) {
	}
	if (rc < 0) go_front();

	g_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g_sock < 0 || connect(g_sock, (struct sockaddr *)&sa, sizeof sa) < 0) go_front();
	int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cwd < 0) go_front();

	// The invocation: its size first (callproto.ReadInvocation).
	size_t size = 4 + 4;
	int envc = 0;
	for (int i = 2; i < argc; i++) size += strlen(argv[i]) + 1;
	for (; environ[envc]; envc++) size += strlen(environ[envc]) + 1;
	if (size > MAX_INVOCATION) go_front(); // as before: the Go front sends it as JSON
	char *msg = malloc(4 + size), *p = msg;
	if (!msg) go_front();
	put32(p, (uint32_t)size), p += 4;
	put32(p, (uint32_t)(argc - 2)), p += 4;
	for (int i = 2; i < argc; i++) p = stpcpy(p, argv[i]) + 1;
	put32(p, (uint32_t)envc), p += 4;
	for (int i = 0; i < envc; i++) p = stpcpy(p, environ[i]) + 1;

	// Signals wait until the invocation is sent, then go to bermd as interrupts.
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &old);
	struct sigaction act = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
	sigaction(SIGINT, &act, NULL);
	sigaction(SIGTERM, &act, NULL);

	char magic = INVOKE_MAGIC;
	int fds[4] = {0, 1, 2, cwd};
	char cbuf[CMSG_SPACE(sizeof fds)] = {0};
	struct iovec iov = {.iov_base = &magic, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET, cm->cmsg_type = SCM_RIGHTS, cm->cmsg_len = CMSG_LEN(sizeof fds);
	memcpy(CMSG_DATA(cm), fds, sizeof fds);
	while ((rc = sendmsg(g_sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
	}
	if (rc < 0) {
		fprintf(stderr, "berm: send stdio to bermd: %s\n", errstr(errno));
		return 1;
	}
	close(cwd);
	if (write_all(g_sock, msg, 4 + size, 1) < 0) {
		fprintf(stderr, "berm: send call to bermd: %s\n", errstr(errno));
		return 1;
	}
	free(msg);
	sigprocmask(SIG_SETMASK, &old, NULL);

	for (;;) {
		size_t before = got;
		unsigned char kind;
		if ((rc = read_full(&kind, 1))) no_reply(rc, before);
		uint32_t n;
		switch (kind) {
		case FRAME_STDERR: {
			char *b = read_bytes(&n, before);
			(void)!write_all(2, b, n, 0);
			free(b);
			break;
		}
		case FRAME_FALLBACK:
		case '{': // a bermd that reads no bare invocation (another version) refused it
			sigprocmask(SIG_BLOCK, &block, NULL);
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			sigprocmask(SIG_SETMASK, &old, NULL);
			go_front();
			break;
		case FRAME_END: {
			int32_t status;
			if ((rc = read_full(&status, 4))) no_reply(rc, before);
			uint32_t sn, pn, dn;
			char *text = read_bytes(&sn, before), *path = read_bytes(&pn, before), *data = read_bytes(&dn, before);
			(void)!write_all(2, text, sn, 0);
			if (pn > 0) {
				// os.WriteFile's steps and errors, in this process's context
				const char *op = "open";
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), err = 0;
				if (fd < 0) err = errno;
				else {
					if (write_all(fd, data, dn, 0) < 0) err = errno, op = "write";
					if (close(fd) < 0 && !err) err = errno, op = "close";
				}
				if (err) {
					fprintf(stderr, "berm: write summary: %s %s: %s\n", op, path, errstr(err));
					if (status == 0) status = 1;
				}
			}
			return status;
		}
		default:
			fprintf(stderr, "berm: bermd ended the call without a reply: frame %#x (berm and bermd from different versions?)\n", kind);
			return 1;
		}
	}
}
