/*
 * kv739_hostile_test.c — lib739kv against fake RESP servers that misbehave:
 * malformed, huge, truncated, split and nested replies, servers that never
 * answer or answer a byte at a time, servers that are down, a child that
 * reuses the inherited socket descriptors after fork, and a slow name
 * lookup. Run by tests/kv739 (TestCHostile), built with AddressSanitizer
 * (and -rdynamic, so that this program's getaddrinfo stands in for libc's)
 * as:
 *
 *     kv739_hostile_test [GROUP...]
 *
 * with no argument every group runs. The fake servers listen on 127.0.0.1
 * on ports the system picks. Every check prints "FAIL <what>" and exits 1;
 * the last line is "OK" on success.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv739.h"

#define CHECK(c, ...)                                        \
	do {                                                 \
		if (!(c)) {                                  \
			printf("FAIL line %d: ", __LINE__); \
			printf(__VA_ARGS__);                 \
			printf("\n");                        \
			exit(1);                             \
		}                                            \
	} while (0)

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a fake RESP server ---- */

/* fake answers CONCORD.MEMBERS with members and every other command with
 * reply (lengths given: replies may hold NUL bytes), in pieces of chunk
 * bytes delay_ms apart when chunk > 0, and closes the connection after a
 * reply when close_after. A NULL reply (or members) is never answered. */
typedef struct fake {
	const char *members;
	size_t members_len;
	const char *reply;
	size_t reply_len;
	int chunk, delay_ms, close_after;
	int lfd;
	char addr[32];
	atomic_int stop;
	atomic_int conns; /* connection threads still running */
	pthread_t accepter;
} fake;

typedef struct fconn {
	fake *f;
	int fd;
	char buf[65536];
	size_t n;
} fconn;

/* wait_in waits for fd to be readable, giving up when the fake stops. */
static int wait_in(fake *f, int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (!atomic_load(&f->stop)) {
		int n = poll(&p, 1, 20);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
	return -1;
}

/* read_cmd reads one request (an array of bulk strings) and reports
 * whether its first word is CONCORD.MEMBERS; -1 at the end. */
static int read_cmd(fconn *c, int *members)
{
	for (;;) {
		/* A complete request ends where its last bulk's CRLF ends; count. */
		size_t i = 0;
		long argc = -1, got = 0;
		int complete = 0;
		if (c->n > 0 && c->buf[0] == '*') {
			char *e = memmem(c->buf, c->n, "\r\n", 2);
			if (e != NULL) {
				argc = strtol(c->buf + 1, NULL, 10);
				i = (size_t)(e - c->buf) + 2;
				while (got < argc) {
					char *le = i < c->n ? memmem(c->buf + i, c->n - i, "\r\n", 2) : NULL;
					if (le == NULL)
						break;
					long len = strtol(c->buf + i + 1, NULL, 10);
					size_t body = (size_t)(le - c->buf) + 2;
					if (body + (size_t)len + 2 > c->n)
						break;
					if (got == 0)
						*members = len == 15 && memcmp(c->buf + body, "CONCORD.MEMBERS", 15) == 0;
					i = body + (size_t)len + 2;
					got++;
				}
				complete = got == argc;
			}
		}
		if (complete) {
			memmove(c->buf, c->buf + i, c->n - i);
			c->n -= i;
			return 0;
		}
		if (c->n == sizeof c->buf || wait_in(c->f, c->fd) < 0)
			return -1;
		ssize_t r = recv(c->fd, c->buf + c->n, sizeof c->buf - c->n, 0);
		if (r <= 0)
			return -1;
		c->n += (size_t)r;
	}
}

static void send_reply(fake *f, int fd, const char *p, size_t n)
{
	size_t step = f->chunk > 0 ? (size_t)f->chunk : n;
	while (n > 0 && !atomic_load(&f->stop)) {
		size_t k = n < step ? n : step;
		if (send(fd, p, k, MSG_NOSIGNAL) < 0)
			return;
		p += k;
		n -= k;
		if (f->delay_ms > 0 && n > 0)
			usleep((useconds_t)f->delay_ms * 1000);
	}
}

static void *serve(void *arg)
{
	fconn *c = arg;
	fake *f = c->f;
	int members;
	while (read_cmd(c, &members) == 0) {
		const char *r = members ? f->members : f->reply;
		size_t n = members ? f->members_len : f->reply_len;
		if (r == NULL)
			continue; /* never answer */
		send_reply(f, c->fd, r, n);
		if (f->close_after)
			break;
	}
	close(c->fd);
	free(c);
	atomic_fetch_sub(&f->conns, 1);
	return NULL;
}

static void *accepter(void *arg)
{
	fake *f = arg;
	while (wait_in(f, f->lfd) == 0) {
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		fconn *c = calloc(1, sizeof *c);
		c->f = f;
		c->fd = fd;
		pthread_t t;
		atomic_fetch_add(&f->conns, 1);
		CHECK(pthread_create(&t, NULL, serve, c) == 0, "pthread_create");
		pthread_detach(t);
	}
	return NULL;
}

/* listen_any binds 127.0.0.1 on a port the system picks. */
static int listen_any(char *addr, size_t size)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 64) == 0, "listen");
	CHECK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0, "getsockname");
	snprintf(addr, size, "127.0.0.1:%d", ntohs(sa.sin_port));
	return fd;
}

static void fake_start(fake *f)
{
	f->lfd = listen_any(f->addr, sizeof f->addr);
	atomic_store(&f->stop, 0);
	atomic_store(&f->conns, 0);
	CHECK(pthread_create(&f->accepter, NULL, accepter, f) == 0, "pthread_create");
}

static void fake_stop(fake *f)
{
	atomic_store(&f->stop, 1);
	pthread_join(f->accepter, NULL);
	close(f->lfd);
	while (atomic_load(&f->conns) > 0) /* each notices stop within 20 ms */
		usleep(1000);
}

#define S(lit) lit, sizeof lit - 1
static const char EMPTY_MEMBERS[] = "*0\r\n";

/* init_one initialises the library with the one server addr, with the
 * call deadline deadline_ms. */
static void init_one(const char *addr, const char *deadline_ms)
{
	char *list[] = {(char *)addr, NULL};
	setenv("KV739_TIMEOUT_MS", deadline_ms, 1);
	CHECK(kv739_init(list) == 0, "init with %s", addr);
}

/* ---- groups ---- */

/* hostile_replies: every malformed answer to a get or put is -1, the
 * caller's buffer is left alone, and nothing is read or written out of
 * bounds (AddressSanitizer). */
static void hostile_replies(void)
{
	static char too_long[2100], nested[800], long_line[10000];
	memcpy(too_long, "$2049\r\n", 7);
	memset(too_long + 7, 'v', 2049);
	memcpy(too_long + 7 + 2049, "\r\n", 2);
	for (int i = 0; i < 200; i++)
		memcpy(nested + 4 * i, "*1\r\n", 4);
	memcpy(nested + 800 - 4, ":1\r\n", 4);
	memset(long_line, 'x', sizeof long_line);
	long_line[0] = '+';
	struct {
		const char *what, *r;
		size_t n;
		int close_after;
	} cases[] = {
	    {"bulk length past long long", S("$99999999999999999999\r\n"), 0},
	    {"bulk length of 100 MB", S("$100000000\r\n"), 0},
	    {"negative bulk length", S("$-5\r\n"), 0},
	    {"bulk length not a number", S("$abc\r\n"), 0},
	    {"empty bulk length", S("$\r\n"), 0},
	    {"2,049-byte value", too_long, 7 + 2049 + 2, 0},
	    {"value with a NUL byte", S("$5\r\nab\0cd\r\n"), 0},
	    {"bulk without its CRLF", S("$3\r\nabcde\r\n"), 0},
	    {"truncated bulk", S("$10\r\nabc"), 1},
	    {"truncated length", S("$1"), 1},
	    {"no answer at all", S(""), 1},
	    {"integer", S(":12\r\n"), 0},
	    {"status", S("+OK\r\n"), 0},
	    {"error", S("-ERR no\r\n"), 0},
	    {"array", S("*1\r\n$1\r\nx\r\n"), 0},
	    {"array past the element limit", S("*99999999\r\n"), 0},
	    {"negative array length", S("*-7\r\n"), 0},
	    {"200 nested arrays", nested, sizeof nested, 0},
	    {"unknown type", S("?what\r\n"), 0},
	    {"empty line", S("\r\n"), 0},
	    {"a line longer than the buffer", long_line, sizeof long_line, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fake f = {.members = S(EMPTY_MEMBERS), .reply = cases[i].r, .reply_len = cases[i].n,
		          .close_after = cases[i].close_after};
		char v[2049 + 64], old[2049 + 64];
		fake_start(&f);
		init_one(f.addr, "100");
		memset(v, 'Z', sizeof v);
		memset(old, 'Z', sizeof old);
		CHECK(kv739_get("k", v) == -1, "get answered with %s", cases[i].what);
		CHECK(kv739_put("k", "v", old) == -1, "put answered with %s", cases[i].what);
		for (size_t j = 0; j < sizeof v; j++)
			CHECK(v[j] == 'Z' && old[j] == 'Z', "%s: the caller's buffer was written at %zu", cases[i].what, j);
		CHECK(kv739_shutdown() == 0, "shutdown");
		fake_stop(&f);
	}
}

/* good_replies: replies split into 1-byte reads, the largest value, an
 * empty value, and hostile member lists (not arrays of names, names too
 * long or with NULs, more than the library keeps) all work. */
static void good_replies(void)
{
	static char max[2100], many[70 * 32 + 16], long_name[420];
	memcpy(max, "$2048\r\n", 7);
	memset(max + 7, 'm', 2048);
	memcpy(max + 7 + 2048, "\r\n", 2);
	size_t n = (size_t)sprintf(many, "*70\r\n");
	for (int i = 0; i < 70; i++)
		n += (size_t)sprintf(many + n, "$15\r\n127.0.0.1:%05d\r\n", 1 + i); /* all down */
	struct {
		const char *what, *members;
		size_t mlen;
		const char *r;
		size_t rlen;
		int chunk;
		const char *want;
	} cases[] = {
	    {"a reply one byte at a time", S("*1\r\n$15\r\n127.0.0.1:00001\r\n"), S("$5\r\nhello\r\n"), 1, "hello"},
	    {"the largest value", S(EMPTY_MEMBERS), max, 7 + 2048 + 2, 0, NULL},
	    {"an empty value", S(EMPTY_MEMBERS), S("$0\r\n\r\n"), 0, ""},
	    {"members not an array", S("+OK\r\n"), S("$1\r\nx\r\n"), 0, "x"},
	    {"members of every kind", S("*5\r\n:1\r\n+a:1\r\n$-1\r\n*0\r\n$8\r\nx\0y:1234\r\n"), S("$1\r\nx\r\n"), 0, "x"},
	    {"a member name of 400 bytes", long_name, 0, S("$1\r\nx\r\n"), 0, "x"},
	    {"a member list that breaks the protocol", S("*2\r\n$3\r\nabcdef\r\n"), S("$1\r\nx\r\n"), 0, "x"},
	    {"a member list past the element limit", S("*99999\r\n"), S("$1\r\nx\r\n"), 0, "x"},
	    {"70 members, all down", many, 0, S("$1\r\nx\r\n"), 0, "x"},
	};
	memcpy(long_name, "*1\r\n$400\r\n", 10);
	memset(long_name + 10, 'x', 398);
	memcpy(long_name + 10 + 398, ":1\r\n", 4);
	cases[5].mlen = 10 + 398 + 4;
	cases[8].mlen = n;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fake f = {.members = cases[i].members, .members_len = cases[i].mlen, .reply = cases[i].r,
		          .reply_len = cases[i].rlen, .chunk = cases[i].chunk, .delay_ms = cases[i].chunk ? 2 : 0};
		char v[2049 + 64], old[2049 + 64];
		fake_start(&f);
		init_one(f.addr, "20000");
		memset(v, 'Z', sizeof v);
		for (int k = 0; k < 3; k++) { /* the first call also learns the members */
			CHECK(kv739_get("k", v) == 0, "get answered with %s (call %d)", cases[i].what, k);
			if (cases[i].want != NULL)
				CHECK(strcmp(v, cases[i].want) == 0, "%s: got '%s'", cases[i].what, v);
			else
				CHECK(strlen(v) == 2048 && v[2049] == 'Z', "%s: %zu bytes, or past the NUL", cases[i].what, strlen(v));
			CHECK(kv739_put("k", "v", old) == 0, "put answered with %s", cases[i].what);
		}
		CHECK(kv739_shutdown() == 0, "shutdown");
		fake_stop(&f);
	}
}

/* within checks that a get and a put through the server at addr fail
 * within the 500 ms deadline (and a margin for a loaded machine). */
static void within(const char *what, const char *addr)
{
	char v[2049], old[2049];
	init_one(addr, "500");
	long long t0 = now_ms();
	CHECK(kv739_get("k", v) == -1, "%s: get", what);
	long long t1 = now_ms();
	CHECK(kv739_put("k", "v", old) == -1, "%s: put", what);
	long long t2 = now_ms();
	CHECK(t1 - t0 < 1500 && t2 - t1 < 1500, "%s: a 500 ms call took %lld ms (get) and %lld ms (put)", what, t1 - t0,
	      t2 - t1);
	CHECK(kv739_shutdown() == 0, "shutdown");
}

/* deadlines: a call returns within KV739_TIMEOUT_MS whatever the server
 * does: never answer, answer the members but not the call, answer half a
 * reply, answer a byte at a time forever. And when every server is down
 * (refused) or the list has bad entries. */
static void deadlines(void)
{
	fake silent = {.members = NULL, .reply = NULL};
	fake_start(&silent);
	within("a server that never answers", silent.addr);
	fake_stop(&silent);

	fake mute = {.members = S(EMPTY_MEMBERS), .reply = NULL};
	fake_start(&mute);
	within("a server that answers only the member list", mute.addr);
	fake_stop(&mute);

	fake half = {.members = S(EMPTY_MEMBERS), .reply = S("$10\r\nabc")};
	fake_start(&half);
	within("a server that answers half a reply", half.addr);
	fake_stop(&half);

	static char slow[40000];
	memcpy(slow, "$30000\r\n", 8);
	memset(slow + 8, 's', sizeof slow - 8);
	fake drip = {.members = S(EMPTY_MEMBERS), .reply = slow, .reply_len = sizeof slow, .chunk = 1, .delay_ms = 50};
	fake_start(&drip);
	within("a server that answers a byte every 50 ms", drip.addr);
	fake_stop(&drip);

	/* Every server down: two ports that refuse (listened on, then closed). */
	char a[32], b[32];
	close(listen_any(a, sizeof a));
	close(listen_any(b, sizeof b));
	char *down[] = {a, b, NULL};
	char v[2049];
	setenv("KV739_TIMEOUT_MS", "500", 1);
	CHECK(kv739_init(down) == 0, "init with servers that are down");
	long long t0 = now_ms();
	CHECK(kv739_get("k", v) == -1, "get with every server down");
	CHECK(now_ms() - t0 < 1500, "get with every server down took %lld ms", now_ms() - t0);
	CHECK(kv739_shutdown() == 0, "shutdown");

	/* A down server first in the list: the next one answers. */
	fake good = {.members = S(EMPTY_MEMBERS), .reply = S("$2\r\nok\r\n")};
	fake_start(&good);
	char *mixed[] = {a, good.addr, NULL};
	setenv("KV739_TIMEOUT_MS", "5000", 1);
	CHECK(kv739_init(mixed) == 0, "init with a down server first");
	CHECK(kv739_get("k", v) == 0 && strcmp(v, "ok") == 0, "get past a down server");
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&good);
}

/* die: a server that never answers the fault command was perhaps never
 * asked (a hung process, or not Concord): -1, within the deadline; one that
 * drops the connection as it dies was asked: 0. */
static void die(void)
{
	fake silent = {.members = NULL, .reply = NULL};
	fake_start(&silent);
	init_one(silent.addr, "500");
	long long t0 = now_ms();
	CHECK(kv739_die(silent.addr, 0) == -1, "die of a server that never answers");
	CHECK(now_ms() - t0 < 1500, "die of a server that never answers took %lld ms", now_ms() - t0);
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&silent);

	fake dying = {.members = NULL, .reply = S(""), .close_after = 1};
	fake_start(&dying);
	init_one(dying.addr, "500");
	CHECK(kv739_die(dying.addr, 1) == 0, "die of a server that drops the connection");
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&dying);
}

/* fork_reused_fds: a child that closes the descriptors it inherited and
 * reuses their numbers (as a daemon does) keeps its own files: the
 * library's first call in the child must not close them. */
static void fork_reused_fds(void)
{
	fake f = {.members = S(EMPTY_MEMBERS), .reply = S("$1\r\nx\r\n")};
	char v[2049];
	fake_start(&f);
	init_one(f.addr, "5000");
	CHECK(kv739_get("k", v) == 0, "get before fork");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		int reused[64], n = 0;
		for (int fd = 3; fd < 64 && n < 64; fd++) {
			struct stat st;
			if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
				int nul = open("/dev/null", O_RDONLY);
				if (nul < 0 || dup2(nul, fd) < 0)
					_exit(10);
				close(nul);
				reused[n++] = fd;
			}
		}
		if (n == 0)
			_exit(11);
		/* The fake's threads are not in the child; the call may fail. */
		setenv("KV739_TIMEOUT_MS", "200", 1);
		kv739_get("k", v);
		for (int i = 0; i < n; i++) {
			struct stat st;
			if (fstat(reused[i], &st) != 0 || !S_ISCHR(st.st_mode))
				_exit(12); /* the child's /dev/null was closed under it */
		}
		_exit(0);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d (12: a reused descriptor was closed)",
	      WEXITSTATUS(status));
	CHECK(kv739_get("k", v) == 0, "parent's get after the fork");
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

/* ---- a slow name lookup ---- */

/* This program's getaddrinfo stands in for libc's in the library (built
 * with -rdynamic): a lookup of slow.kv739.test takes 1 s the first time
 * (a slow resolver) and then fails. */
static atomic_int slow_lookups, in_slow_lookup;

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
	if (node != NULL && strstr(node, ".many.kv739.test") != NULL) {
		usleep(20 * 1000); /* one of many slow members: 20 ms each, then not found */
		return EAI_NONAME;
	}
	if (node != NULL && strcmp(node, "slow.kv739.test") == 0) {
		if (atomic_fetch_add(&slow_lookups, 1) == 0) {
			atomic_store(&in_slow_lookup, 1);
			usleep(1000 * 1000);
			atomic_store(&in_slow_lookup, 0);
		}
		return EAI_NONAME;
	}
	if (real == NULL)
		real = (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
	return real(node, service, hints, res);
}

static void *first_get(void *arg)
{
	char v[2049];
	*(int *)arg = kv739_get("k", v);
	return NULL;
}

/* slow_lookup: a member name that takes a second to look up must not hold
 * up the other threads' calls (the library's lock is never held across
 * network I/O, a lookup included). */
static void slow_lookup(void)
{
	fake f = {.members = S("*1\r\n$20\r\nslow.kv739.test:7001\r\n"), .reply = S("$1\r\nx\r\n")};
	char v[2049];
	int rc = -2;
	pthread_t t;
	fake_start(&f);
	init_one(f.addr, "5000");
	CHECK(pthread_create(&t, NULL, first_get, &rc) == 0, "pthread_create");
	while (!atomic_load(&in_slow_lookup))
		usleep(1000);
	long long t0 = now_ms();
	CHECK(kv739_get("k", v) == 0, "get while another thread looks a member up");
	long long took = now_ms() - t0;
	pthread_join(t, NULL);
	CHECK(rc == 0, "the get that looked the member up: %d", rc);
	CHECK(took < 500, "a get waited %lld ms for another thread's name lookup", took);
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

/* many_slow_members: a member list of 300 names that take 20 ms each to
 * look up (6 s in all) ends its call at the call's deadline (1 s), not
 * after every lookup: learning stops at the deadline (and at the most
 * servers kept). */
static void many_slow_members(void)
{
	enum { N = 300 };
	static char members[N * 48 + 16];
	size_t n = (size_t)snprintf(members, sizeof members, "*%d\r\n", N);
	for (int i = 0; i < N; i++) {
		char name[40];
		int len = snprintf(name, sizeof name, "m%d.many.kv739.test:7001", i);
		n += (size_t)snprintf(members + n, sizeof members - n, "$%d\r\n%s\r\n", len, name);
	}
	fake f = {.members = members, .members_len = n, .reply = S("$1\r\nx\r\n")};
	char v[2049];
	fake_start(&f);
	init_one(f.addr, "1000");
	long long t0 = now_ms();
	(void)kv739_get("k", v); /* answered or out of time: either way, by its deadline */
	long long took = now_ms() - t0;
	CHECK(took < 2000, "a get with 300 slow member names took %lld ms; its deadline is 1000 ms", took);
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

/* bad_env: a KV739_TIMEOUT_MS that is not a whole number of milliseconds
 * from 1 to 86,400,000 makes init fail and change nothing (it used to be
 * ignored, or read as its leading digits: "1e3" was 1 ms). */
static void bad_env(void)
{
	fake f = {.members = S(EMPTY_MEMBERS), .reply = S("$1\r\nx\r\n")};
	char v[2049];
	const char *bad[] = {"abc", "0", "-5", "1e3", "500ms", " 500", "99999999999", "86400001"};
	fake_start(&f);
	char *list[] = {f.addr, NULL};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("KV739_TIMEOUT_MS", bad[i], 1);
		CHECK(kv739_init(list) == -1, "init with KV739_TIMEOUT_MS='%s'", bad[i]);
		CHECK(kv739_get("k", v) == -1, "a failed init initialises nothing");
	}
	init_one(f.addr, "86400000");
	setenv("KV739_TIMEOUT_MS", "abc", 1);
	CHECK(kv739_init(list) == -1, "re-init with a bad KV739_TIMEOUT_MS");
	CHECK(kv739_get("k", v) == 0, "a failed re-init leaves the library as it was");
	CHECK(kv739_shutdown() == 0, "shutdown");
	unsetenv("KV739_TIMEOUT_MS");
	CHECK(kv739_init(list) == 0, "init without KV739_TIMEOUT_MS");
	CHECK(kv739_shutdown() == 0, "shutdown");
	setenv("KV739_TIMEOUT_MS", "", 1);
	CHECK(kv739_init(list) == 0, "init with an empty KV739_TIMEOUT_MS (the default)");
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

/* out_of_step: a server that sends two replies to one command must not
 * have the second taken as the answer to the next command (a get would
 * return another key's value, a put another old value). */
static void out_of_step(void)
{
	fake f = {.members = S(EMPTY_MEMBERS), .reply = S("$1\r\nx\r\n$5\r\nextra\r\n")};
	char v[2049];
	fake_start(&f);
	init_one(f.addr, "5000");
	for (int i = 0; i < 5; i++) {
		CHECK(kv739_get("k", v) == 0, "get %d", i);
		CHECK(strcmp(v, "x") == 0, "get %d returned '%s', a reply meant for nothing", i, v);
	}
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) != -1;
	return n;
}

/* fd_leaks: init, calls that succeed and fail (an answer, a garbled one,
 * a silent server, a refused port), die and partition, and shutdown leave
 * no descriptor open. */
static void fd_leaks(void)
{
	fake good = {.members = S(EMPTY_MEMBERS), .reply = S("$1\r\nx\r\n")};
	fake garbled = {.members = S(EMPTY_MEMBERS), .reply = S("$9\r\nab"), .close_after = 1};
	fake silent = {.members = NULL, .reply = NULL};
	char down[32], v[2049], old[2049];
	int before = open_fds(); /* the fakes' own descriptors are all closed when they stop */
	fake_start(&good);
	fake_start(&garbled);
	fake_start(&silent);
	close(listen_any(down, sizeof down));
	setenv("KV739_TIMEOUT_MS", "100", 1);
	for (int i = 0; i < 20; i++) {
		char *list[] = {down, garbled.addr, silent.addr, good.addr, NULL};
		char *none[] = {NULL};
		CHECK(kv739_init(list) == 0, "init");
		kv739_get("k", v);
		kv739_put("k", "v", old);
		kv739_die(silent.addr, 0);
		kv739_die(garbled.addr, 0);
		kv739_partition(good.addr, none);
		kv739_die(down, 0);
		CHECK(kv739_shutdown() == 0, "shutdown");
	}
	fake_stop(&good);
	fake_stop(&garbled);
	fake_stop(&silent);
	CHECK(open_fds() == before, "%d descriptors open after 20 cycles, %d before", open_fds(), before);
}

/* reply_budget: a reply as a whole is bounded, not only each bulk in it:
 * an array of 64 bulks of 1 MB each (every one within the bulk limit) used
 * to be read and held whole, 64 MB, before the library found it was not a
 * value. */
static void reply_budget(void);

/* no_space: a put answered -NOSPACE (the cluster's space alarm) returns -1
 * at once, not after retrying until the call's deadline (10 s here). */
static void no_space(void)
{
	fake f = {.members = S(EMPTY_MEMBERS),
	          .reply = S("-NOSPACE node 2 has 800.0 MiB free, under its --reserve-disk-bytes of 1.0 GiB\r\n")};
	char old[2049];
	fake_start(&f);
	init_one(f.addr, "10000");
	long long start = now_ms();
	CHECK(kv739_put("k", "v", old) == -1, "put answered -NOSPACE did not fail");
	long long took = now_ms() - start;
	CHECK(took < 2000, "put answered -NOSPACE took %lld ms: retried towards the deadline", took);
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

static void reply_budget(void)
{
	size_t n = 5, one = 10 + (1 << 20) + 2;
	char *r = malloc(n + 64 * one);
	CHECK(r != NULL, "malloc");
	memcpy(r, "*64\r\n", 5);
	for (int i = 0; i < 64; i++, n += one) {
		memcpy(r + n, "$1048576\r\n", 10);
		memset(r + n + 10, 'b', 1 << 20);
		memcpy(r + n + 10 + (1 << 20), "\r\n", 2);
	}
	fake f = {.members = S(EMPTY_MEMBERS), .reply = r, .reply_len = n, .close_after = 1};
	struct rusage before, after;
	char v[2049];
	fake_start(&f);
	init_one(f.addr, "2000");
	getrusage(RUSAGE_SELF, &before);
	CHECK(kv739_get("k", v) == -1, "get answered with 64 MB");
	getrusage(RUSAGE_SELF, &after);
	CHECK(after.ru_maxrss - before.ru_maxrss < 16 * 1024, "a 64 MB reply grew the peak memory by %ld KB",
	      after.ru_maxrss - before.ru_maxrss);
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
	free(r);
}

/* ---- many threads, and init and shutdown under them ---- */

static atomic_int workers_stop, bad_rc;

static void *worker(void *arg)
{
	char k[32], v[2049], old[2049];
	snprintf(k, sizeof k, "t%ld", (long)arg);
	while (!atomic_load(&workers_stop)) {
		int g = kv739_get(k, v), p = kv739_put(k, "v", old);
		/* 0 from the fake; -1 when a re-init or shutdown ends the call */
		if ((g != 0 && g != -1) || (p != 0 && p != -1) || (g == 0 && strcmp(v, "x") != 0))
			atomic_store(&bad_rc, 1);
	}
	return NULL;
}

/* reinit: 8 threads call gets and puts while the main thread initialises
 * the library again and again, and shuts it down and back up: a call in
 * flight then fails (-1) or succeeds, never touches freed memory
 * (AddressSanitizer) or races (ThreadSanitizer), and every slot is freed
 * (the leak checker). */
static void reinit(void)
{
	fake f = {.members = S(EMPTY_MEMBERS), .reply = S("$1\r\nx\r\n")};
	pthread_t t[8];
	fake_start(&f);
	init_one(f.addr, "2000");
	atomic_store(&workers_stop, 0);
	for (long i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < 200; i++) {
		char *list[] = {f.addr, NULL};
		if (i % 10 == 9)
			CHECK(kv739_shutdown() == 0, "shutdown under calls");
		CHECK(kv739_init(list) == 0, "init under calls");
		usleep(1000);
	}
	atomic_store(&workers_stop, 1);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	CHECK(!atomic_load(&bad_rc), "a call under re-init returned something other than 0 or -1");
	char v[2049];
	CHECK(kv739_get("k", v) == 0, "get after the re-inits");
	CHECK(kv739_shutdown() == 0, "shutdown");
	fake_stop(&f);
}

int main(int argc, char **argv)
{
	struct {
		const char *name;
		void (*run)(void);
	} groups[] = {
	    {"hostile_replies", hostile_replies},
	    {"good_replies", good_replies},
	    {"deadlines", deadlines},
	    {"die", die},
	    {"fork_reused_fds", fork_reused_fds},
	    {"slow_lookup", slow_lookup},
	    {"many_slow_members", many_slow_members},
	    {"reinit", reinit},
	    {"bad_env", bad_env},
	    {"out_of_step", out_of_step},
	    {"fd_leaks", fd_leaks},
	    {"reply_budget", reply_budget},
	    {"no_space", no_space},
	};
	setvbuf(stdout, NULL, _IONBF, 0);
	for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
		int want = argc == 1;
		for (int a = 1; a < argc; a++)
			want |= strcmp(argv[a], groups[i].name) == 0;
		if (want) {
			groups[i].run();
			printf("%s ok\n", groups[i].name);
		}
	}
	printf("OK\n");
	return 0;
}
