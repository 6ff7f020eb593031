/*
 * conn.c — a minimal RESP2 client connection: enough for the replies
 * lib739kv asks for (status, error, integer, bulk, nil, arrays of those).
 * Our own small parser rather than hiredis: the library must be one .so
 * with no dependency to install, and Debian ships hiredis's static archive
 * without -fPIC, so it cannot be linked into a shared object.
 */
#define _GNU_SOURCE
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Replies larger than this are refused: values are at most 2,048 bytes and
 * member lists are short, so anything bigger is not an answer to us. The
 * limit is on the whole reply (its bulks' bytes and its elements' structs
 * together), not on each bulk: an array of bulks each within a per-bulk
 * limit could otherwise hold gigabytes. */
#define MAX_REPLY (1 << 20)
#define MAX_ELEMS 4096
#define MAX_DEPTH 4

long long conn_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void conn_init(conn *c)
{
	c->fd = -1;
	c->dev = 0;
	c->ino = 0;
	c->start = c->end = 0;
	c->dropped = 0;
}

void conn_close(conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	conn_init(c);
}

int conn_idle(conn *c)
{
	char b;
	if (c->fd < 0 || c->start != c->end)
		return 0;
	ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void conn_forget(conn *c)
{
	struct stat st;
	if (c->fd >= 0 && fstat(c->fd, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		close(c->fd);
	conn_init(c);
}

/* wait_fd waits for events on fd until deadline; 0, or -1 at the deadline.
 * A signal does not restart the wait's full length: what is left is. */
static int wait_fd(int fd, short events, long long deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	for (;;) {
		long long left = deadline - conn_now_ms();
		if (left <= 0)
			return -1;
		int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

static int connect_addr(const struct addrinfo *ai, long long deadline)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0)
		return -1;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		int err = 0;
		socklen_t len = sizeof err;
		if (errno != EINPROGRESS || wait_fd(fd, POLLOUT, deadline) < 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
			close(fd);
			return -1;
		}
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

int conn_open(conn *c, const char *host, const char *port, long long deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
	struct stat st;
	conn_close(c);
	if (getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	for (ai = res; ai != NULL && c->fd < 0; ai = ai->ai_next)
		c->fd = connect_addr(ai, deadline);
	freeaddrinfo(res);
	if (c->fd >= 0 && fstat(c->fd, &st) < 0)
		conn_close(c);
	if (c->fd < 0)
		return -1;
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	return 0;
}

static int write_all(conn *c, const char *p, size_t n, long long deadline)
{
	while (n > 0) {
		/* MSG_NOSIGNAL: a peer that closed must not raise SIGPIPE in the caller. */
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wait_fd(c->fd, POLLOUT, deadline) < 0)
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

/* fill reads more bytes into the buffer, compacting it first. */
static int fill(conn *c, long long deadline)
{
	if (c->start > 0) {
		memmove(c->buf, c->buf + c->start, c->end - c->start);
		c->end -= c->start;
		c->start = 0;
	}
	if (c->end == CONN_BUF)
		return -1;
	for (;;) {
		ssize_t r = recv(c->fd, c->buf + c->end, CONN_BUF - c->end, 0);
		if (r > 0) {
			c->end += (size_t)r;
			return 0;
		}
		if (r == 0 || (r < 0 && errno == ECONNRESET)) {
			c->dropped = 1;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if ((errno != EAGAIN && errno != EWOULDBLOCK) || wait_fd(c->fd, POLLIN, deadline) < 0)
			return -1;
	}
}

/* read_line returns the next line without its CRLF (NUL-terminated in
 * place) and consumes it. */
static char *read_line(conn *c, long long deadline)
{
	for (;;) {
		char *p = c->buf + c->start;
		size_t n = c->end - c->start;
		char *crlf = n >= 2 ? memmem(p, n, "\r\n", 2) : NULL;
		if (crlf != NULL) {
			*crlf = '\0';
			c->start += (size_t)(crlf - p) + 2;
			return p;
		}
		if (fill(c, deadline) < 0)
			return NULL;
	}
}

static int read_exact(conn *c, char *dst, size_t n, long long deadline)
{
	while (n > 0) {
		if (c->start == c->end && fill(c, deadline) < 0)
			return -1;
		size_t k = c->end - c->start < n ? c->end - c->start : n;
		memcpy(dst, c->buf + c->start, k);
		c->start += k;
		dst += k;
		n -= k;
	}
	return 0;
}

static int parse_int(const char *s, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* charge takes n bytes from what is left of the reply's budget; -1 if
 * they are not there. */
static int charge(size_t *budget, long long n)
{
	if (n < 0 || (unsigned long long)n > *budget)
		return -1;
	*budget -= (size_t)n;
	return 0;
}

static int read_reply(conn *c, reply *r, long long deadline, int depth, size_t *budget)
{
	memset(r, 0, sizeof *r);
	char *line = read_line(c, deadline);
	if (line == NULL || line[0] == '\0')
		return -1;
	char type = line[0];
	const char *rest = line + 1;
	long long n;
	switch (type) {
	case '+':
	case '-':
		r->kind = type == '+' ? R_STATUS : R_ERROR;
		r->len = strlen(rest);
		if (charge(budget, (long long)r->len) < 0)
			return -1;
		r->str = strdup(rest);
		return r->str != NULL ? 0 : -1;
	case ':':
		r->kind = R_INT;
		return parse_int(rest, &r->integer);
	case '$':
		if (parse_int(rest, &n) < 0 || n < -1 || (n >= 0 && charge(budget, n) < 0))
			return -1;
		if (n == -1) {
			r->kind = R_NIL;
			return 0;
		}
		r->kind = R_BULK;
		r->len = (size_t)n;
		if ((r->str = malloc((size_t)n + 2)) == NULL)
			return -1;
		if (read_exact(c, r->str, (size_t)n + 2, deadline) < 0 || r->str[n] != '\r' || r->str[n + 1] != '\n')
			return -1;
		r->str[n] = '\0';
		return 0;
	case '*':
		if (parse_int(rest, &n) < 0 || n < -1 || n > MAX_ELEMS || depth >= MAX_DEPTH ||
		    (n > 0 && charge(budget, n * (long long)sizeof(reply)) < 0))
			return -1;
		if (n == -1) {
			r->kind = R_NIL;
			return 0;
		}
		r->kind = R_ARRAY;
		if (n == 0)
			return 0;
		if ((r->elems = calloc((size_t)n, sizeof *r->elems)) == NULL)
			return -1;
		for (r->n = 0; r->n < (size_t)n; r->n++)
			if (read_reply(c, &r->elems[r->n], deadline, depth + 1, budget) < 0) {
				r->n++; /* free the partial element too */
				return -1;
			}
		return 0;
	default:
		return -1;
	}
}

void reply_free(reply *r)
{
	for (size_t i = 0; i < r->n; i++)
		reply_free(&r->elems[i]);
	free(r->elems);
	free(r->str);
	memset(r, 0, sizeof *r);
}

int conn_call(conn *c, int argc, const char **argv, const size_t *lens, reply *r, long long deadline)
{
	size_t size = 32;
	memset(r, 0, sizeof *r);
	for (int i = 0; i < argc; i++)
		size += lens[i] + 32;
	char *msg = malloc(size), *p = msg;
	if (msg == NULL)
		return -1;
	p += sprintf(p, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		p += sprintf(p, "$%zu\r\n", lens[i]);
		memcpy(p, argv[i], lens[i]);
		p += lens[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	int rc = write_all(c, msg, (size_t)(p - msg), deadline);
	free(msg);
	c->dropped = 0;
	size_t budget = MAX_REPLY;
	if (rc == 0)
		rc = read_reply(c, r, deadline, 0, &budget);
	if (rc < 0) {
		rc = c->dropped ? CONN_DROPPED : -1;
		reply_free(r);
		conn_close(c);
	}
	return rc;
}
