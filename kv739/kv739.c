/*
 * kv739.c — the CS739 key-value API over the Redis protocol (RESP), for
 * Concord. See include/kv739.h for the API and docs/kv739.md for the
 * semantics.
 *
 * State. One global, guarded by mu: the server list (the ones given to
 * kv739_init, then the cluster's other members as a server reports them)
 * and a pool of client slots. A slot is what one call uses: a client
 * session (id and next sequence number, for at-most-once puts) and its own
 * connection to each server. A call takes a free slot (or makes one) under
 * mu, does its network I/O without any lock, and gives the slot back; so
 * calls from many threads run in parallel, each on its own sockets, and a
 * session never has two requests in flight. kv739_init and kv739_shutdown
 * may run under calls: a slot in use is not freed but orphaned (its gen is
 * older than g.gen), its call fails at its next attempt, and release frees
 * it.
 *
 * Fork. pthread_atfork keeps mu consistent across fork(); the first call in
 * the child sees a new pid and, before using anything, closes the child's
 * copies of every inherited socket (the parent's connections are left
 * alone) and gives every slot a new session: parent and child never share
 * a socket or a session.
 *
 * Retries. A get is retried on the next server until the call's deadline.
 * A put carries its slot's session id and a fresh sequence number
 * (CONCORD.SESSION id seq SET key value GET) and is retried with the same
 * pair: a server answers a retry of a put that was applied from the
 * shard's session table, with the old value from before it, so a put
 * applies at most once and reports what it replaced. Under the available
 * profile a put is a GET and a plain SET instead (put_available): only a
 * plain SET may be held as a tentative write. A -NOSPACE answer
 * (the cluster's space alarm: a disk is under its reserve) ends the call
 * at once: every server refuses writes that add data alike until space is
 * freed, so retrying would only hold the caller until the deadline.
 */
#define _GNU_SOURCE
#include "../include/kv739.h"
#include "conn.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

#define MAX_SERVERS 64
#define MAX_NAME 300
#define MAX_KEY 128
#define MAX_VALUE 2048
#define CONNECT_TIMEOUT_MS 1000
#define IO_TIMEOUT_MS 5000
#define DEFAULT_DEADLINE_MS 15000
#define MAX_DEADLINE_MS 86400000

typedef struct server {
	char name[MAX_NAME]; /* as given, or as a member reported it */
	char host[MAX_NAME];
	char port[8];
	int given; /* in the init list: may be killed or partitioned */
} server;

typedef struct slot {
	uint64_t session, seq;
	unsigned cur;                /* the server this slot tries first */
	conn *conns[MAX_SERVERS];    /* by server index; allocated on first use */
	unsigned gen;                /* the init it belongs to (g.gen) */
	int busy;                    /* a call holds it */
	struct slot *next_free, *next_all;
} slot;

/* The consistency profiles (KV739_CONSISTENCY), indexes of profiles[]. */
enum { PROFILE_LINEARIZABLE, PROFILE_STALE, PROFILE_AVAILABLE };
static const char *const profiles[] = {"linearizable", "stale", "available"};

static struct {
	pthread_mutex_t mu;
	int initialized;
	pid_t pid;
	server servers[MAX_SERVERS];
	unsigned nservers;
	int learned; /* the members were asked for */
	int profile; /* KV739_CONSISTENCY: a PROFILE_* */
	int deadline_ms;
	unsigned next_start;
	unsigned gen; /* counts inits and shutdowns: a slot of an older one is stale */
	slot *free, *all;
	slot *orphans; /* slots that calls held when init or shutdown ran */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void lock(void) { pthread_mutex_lock(&g.mu); }
static void unlock(void) { pthread_mutex_unlock(&g.mu); }
static void register_atfork(void) { pthread_atfork(lock, unlock, unlock); }

static uint64_t new_session(void)
{
	uint64_t v = 0;
	while (v == 0) {
		if (getrandom(&v, sizeof v, 0) != sizeof v) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
		}
	}
	return v;
}

/* until is the deadline of one step that may take ms, within the call's
 * deadline. */
static long long until(long long deadline, int ms)
{
	long long t = conn_now_ms() + ms;
	return t < deadline ? t : deadline;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- validation ---- */

static int printable(const char *s, size_t min, size_t max)
{
	size_t n = 0;
	if (s == NULL)
		return 0;
	for (; s[n] != '\0'; n++) {
		unsigned char ch = (unsigned char)s[n];
		if (n >= max || ch < 32 || ch > 126 || ch == '[' || ch == ']')
			return 0;
	}
	return n >= min;
}

/* parse_name splits "host:port" into sv; 0, or -1 if malformed or the host
 * does not resolve. */
static int parse_name(const char *name, server *sv)
{
	const char *colon = strchr(name, ':');
	size_t n = strlen(name);
	if (n == 0 || n >= MAX_NAME || colon == NULL || strchr(colon + 1, ':') != NULL || colon == name)
		return -1;
	const char *p = colon + 1;
	if (*p == '\0' || strlen(p) > 5)
		return -1;
	long port = 0;
	for (; *p != '\0'; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		port = port * 10 + (*p - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	memset(sv, 0, sizeof *sv);
	memcpy(sv->name, name, n);
	memcpy(sv->host, name, (size_t)(colon - name));
	snprintf(sv->port, sizeof sv->port, "%ld", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(sv->host, sv->port, &hints, &res) != 0)
		return -1;
	freeaddrinfo(res);
	return 0;
}

/* parse_deadline reads KV739_TIMEOUT_MS: unset or empty is the default,
 * else a whole number of milliseconds from 1 to a day; -1 if not. */
static int parse_deadline(const char *s)
{
	long v = 0;
	if (s == NULL || *s == '\0')
		return DEFAULT_DEADLINE_MS;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || v > MAX_DEADLINE_MS)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v >= 1 && v <= MAX_DEADLINE_MS ? (int)v : -1;
}

/* ---- slots ---- */

static void slot_free(slot *s)
{
	for (unsigned i = 0; i < MAX_SERVERS; i++)
		if (s->conns[i] != NULL) {
			conn_close(s->conns[i]);
			free(s->conns[i]);
		}
	free(s);
}

/* slot_forget frees s in a forked child: the descriptors are the
 * parent's. */
static void slot_forget(slot *s)
{
	for (unsigned i = 0; i < MAX_SERVERS; i++)
		if (s->conns[i] != NULL) {
			conn_forget(s->conns[i]);
			free(s->conns[i]);
		}
	free(s);
}

/* after_fork runs, under mu, in the first call of a forked child. The
 * threads that held slots at the fork are not in the child: every slot is
 * free again, and the orphans will never be released. */
static void after_fork(void)
{
	g.free = NULL;
	for (slot *s = g.all; s != NULL; s = s->next_all) {
		for (unsigned i = 0; i < MAX_SERVERS; i++)
			if (s->conns[i] != NULL)
				conn_forget(s->conns[i]);
		s->session = new_session();
		s->seq = 1;
		s->busy = 0;
		s->next_free = g.free;
		g.free = s;
	}
	for (slot *s = g.orphans, *next; s != NULL; s = next) {
		next = s->next_all;
		slot_forget(s);
	}
	g.orphans = NULL;
	g.pid = getpid();
}

static slot *acquire(void)
{
	lock();
	if (!g.initialized) {
		unlock();
		return NULL;
	}
	if (g.pid != getpid())
		after_fork();
	slot *s = g.free;
	if (s != NULL) {
		g.free = s->next_free;
	} else if ((s = calloc(1, sizeof *s)) != NULL) {
		s->session = new_session();
		s->seq = 1;
		s->cur = g.next_start++;
		s->gen = g.gen;
		s->next_all = g.all;
		g.all = s;
	}
	if (s != NULL)
		s->busy = 1;
	unlock();
	return s;
}

/* release gives s back; an orphan (its init was replaced or shut down
 * while the call ran) is freed instead. */
static void release(slot *s)
{
	lock();
	s->busy = 0;
	if (s->gen == g.gen) {
		s->next_free = g.free;
		g.free = s;
	} else {
		slot **p = &g.orphans;
		while (*p != s)
			p = &(*p)->next_all;
		*p = s->next_all;
		slot_free(s);
	}
	unlock();
}

/* free_all drops every slot and server, under mu. A slot that a call
 * holds becomes an orphan, freed when the call releases it: the call sees
 * its init gone and fails. */
static void free_all(void)
{
	for (slot *s = g.all, *next; s != NULL; s = next) {
		next = s->next_all;
		if (s->busy) {
			s->next_all = g.orphans;
			g.orphans = s;
		} else {
			slot_free(s);
		}
	}
	g.all = g.free = NULL;
	g.nservers = 0;
	g.learned = 0;
	g.initialized = 0;
	g.gen++;
}

/* ---- calls ---- */

/* learn adds the members c's server reports (CONCORD.MEMBERS) to the
 * server list, so that gets and puts still find a server when the given
 * ones are down. Failures are ignored: it is asked again next time. The
 * names are parsed (looked up: network I/O) before mu is taken. */
static void learn(conn *c, long long deadline, unsigned gen)
{
	const char *argv[] = {"CONCORD.MEMBERS"};
	size_t lens[] = {15};
	reply r;
	if (conn_call(c, 1, argv, lens, &r, deadline) < 0)
		return;
	if (r.kind == R_ARRAY) {
		server *found = calloc(r.n > 0 ? r.n : 1, sizeof *found);
		size_t nfound = 0;
		/* At most MAX_SERVERS names are kept, and each may be looked
		 * up: stop there, and at the call's deadline. */
		for (size_t i = 0; found != NULL && i < r.n && nfound < MAX_SERVERS && conn_now_ms() < deadline; i++)
			if (r.elems[i].kind == R_BULK && parse_name(r.elems[i].str, &found[nfound]) == 0)
				nfound++;
		lock();
		for (size_t i = 0; g.gen == gen && i < nfound; i++) { /* not into a newer init's list */
			int known = 0;
			for (unsigned j = 0; j < g.nservers && !known; j++)
				known = strcmp(g.servers[j].name, found[i].name) == 0;
			if (!known && g.nservers < MAX_SERVERS)
				g.servers[g.nservers++] = found[i];
		}
		if (g.gen == gen)
			g.learned = found != NULL;
		unlock();
		free(found);
	}
	reply_free(&r);
}

/* connect_slot makes sure s has a live connection to server i, set to
 * the profile's consistency (a server's connections start linearizable). */
static conn *connect_slot(slot *s, unsigned i, const server *sv, int profile, long long deadline)
{
	if (s->conns[i] == NULL) {
		if ((s->conns[i] = malloc(sizeof(conn))) == NULL)
			return NULL;
		conn_init(s->conns[i]);
	}
	conn *c = s->conns[i];
	if (conn_idle(c))
		return c;
	if (conn_open(c, sv->host, sv->port, until(deadline, CONNECT_TIMEOUT_MS)) < 0)
		return NULL;
	if (profile != PROFILE_LINEARIZABLE) {
		const char *argv[] = {"CONCORD.CONSISTENCY", profiles[profile]};
		size_t lens[] = {19, strlen(profiles[profile])};
		reply r;
		if (conn_call(c, 2, argv, lens, &r, until(deadline, IO_TIMEOUT_MS)) < 0)
			return NULL;
		int ok = r.kind == R_STATUS;
		reply_free(&r);
		if (!ok) {
			conn_close(c);
			return NULL;
		}
	}
	return c;
}

/* no_space reports whether error reply r is the space alarm's refusal
 * (-NOSPACE), which every server gives alike. */
static int no_space(const reply *r)
{
	return r->len >= 8 && memcmp(r->str, "NOSPACE ", 8) == 0;
}

/* call sends argv through s, to one server after another, until a server
 * answers with something other than an error, answers -NOSPACE (no_space)
 * or the deadline passes.
 * 0 with the answer in r, or -1. */
static int call(slot *s, int argc, const char **argv, const size_t *lens, reply *r)
{
	lock();
	long long deadline = conn_now_ms() + g.deadline_ms;
	unlock();
	int backoff = 20;
	for (unsigned tried = 0;; tried++) {
		lock();
		if (s->gen != g.gen) { /* init or shutdown ran: the list s was for is gone */
			unlock();
			return -1;
		}
		unsigned n = g.nservers, i = s->cur % n;
		server sv = g.servers[i];
		int learned = g.learned, profile = g.profile;
		unlock();
		conn *c = connect_slot(s, i, &sv, profile, deadline);
		if (c != NULL && !learned) {
			learn(c, until(deadline, IO_TIMEOUT_MS), s->gen);
			/* A server that garbles the member list may still answer
			 * the call: learning must not cost the attempt. */
			c = connect_slot(s, i, &sv, profile, deadline);
		}
		if (c != NULL && conn_call(c, argc, argv, lens, r, until(deadline, IO_TIMEOUT_MS)) == 0) {
			if (r->kind != R_ERROR)
				return 0;
			int definite = no_space(r);
			reply_free(r); /* unavailable, timed out, not yet ready: another server may do */
			if (definite)
				return -1;
		}
		s->cur = i + 1;
		long long left = deadline - conn_now_ms();
		if (left <= 0)
			return -1;
		if ((tried + 1) % n == 0) { /* every server failed once: wait a little */
			sleep_ms(backoff < left ? backoff : (int)left);
			backoff = backoff * 2 > 500 ? 500 : backoff * 2;
		}
	}
}

/* copy_value copies a bulk reply into dst (2,049 bytes); -1 if it does
 * not fit the API's limits. */
static int copy_value(const reply *r, char *dst)
{
	if (r->len > MAX_VALUE || memchr(r->str, '\0', r->len) != NULL)
		return -1;
	if (dst != NULL)
		memcpy(dst, r->str, r->len + 1);
	return 0;
}

/* parse_profile reads KV739_CONSISTENCY: a PROFILE_*, linearizable when
 * unset or empty; -1 for anything else. */
static int parse_profile(const char *mode)
{
	if (mode == NULL || *mode == '\0')
		return PROFILE_LINEARIZABLE;
	for (int i = 0; i < (int)(sizeof profiles / sizeof profiles[0]); i++)
		if (strcmp(mode, profiles[i]) == 0)
			return i;
	return -1;
}

API int kv739_init(char **server_names)
{
	server *list;
	unsigned n = 0;
	pthread_once(&atfork_once, register_atfork);
	if (server_names == NULL)
		return -1;
	while (server_names[n] != NULL && server_names[n][0] != '\0')
		n++;
	if (n == 0 || n > MAX_SERVERS || (list = calloc(n, sizeof *list)) == NULL)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		if (parse_name(server_names[i], &list[i]) < 0) {
			free(list);
			return -1;
		}
		list[i].given = 1;
	}
	int profile = parse_profile(getenv("KV739_CONSISTENCY"));
	if (profile < 0) {
		free(list);
		return -1;
	}
	int deadline_ms = parse_deadline(getenv("KV739_TIMEOUT_MS"));
	if (deadline_ms < 0) {
		free(list);
		return -1;
	}
	lock();
	if (g.initialized)
		free_all();
	memcpy(g.servers, list, n * sizeof *list);
	g.nservers = n;
	g.profile = profile;
	g.deadline_ms = deadline_ms;
	g.pid = getpid();
	g.initialized = 1;
	unlock();
	free(list);
	return 0;
}

API int kv739_shutdown(void)
{
	lock();
	if (!g.initialized) {
		unlock();
		return -1;
	}
	free_all();
	unlock();
	return 0;
}

API int kv739_get(char *key, char *value)
{
	if (!printable(key, 1, MAX_KEY) || value == NULL)
		return -1;
	slot *s = acquire();
	if (s == NULL)
		return -1;
	const char *argv[] = {"GET", key};
	size_t lens[] = {3, strlen(key)};
	reply r;
	int rc = -1;
	if (call(s, 2, argv, lens, &r) == 0) {
		if (r.kind == R_NIL)
			rc = 1;
		else if (r.kind == R_BULK)
			rc = copy_value(&r, value);
		reply_free(&r);
	}
	release(s);
	return rc;
}

/* put_available is kv739_put under the available profile: the value the
 * server knows (GET: its tentative write of the key, else its replica's),
 * then a plain SET, which a server whose shard has no quorum holds as a
 * tentative write (a session's write is never held: it could not be
 * answered from the session table on retry). A retried SET writes the
 * same value again. 0 and the old value, 1 if none, -1 (old_value
 * untouched) if either call failed. */
static int put_available(slot *s, char *key, char *value, char *old_value)
{
	const char *get[] = {"GET", key}, *set[] = {"SET", key, value};
	size_t get_lens[] = {3, strlen(key)}, set_lens[] = {3, strlen(key), strlen(value)};
	char old[MAX_VALUE + 1];
	reply r;
	int rc = -1;
	if (call(s, 2, get, get_lens, &r) < 0)
		return -1;
	if (r.kind == R_NIL)
		rc = 1;
	else if (r.kind == R_BULK && copy_value(&r, old) == 0)
		rc = 0;
	/* An old value this library cannot return (longer than MAX_VALUE, or
	 * holding a NUL: another Redis client's) does not stop the write,
	 * as in the linearizable profile: the put is made and returns -1. */
	int readable = r.kind == R_NIL || rc == 0;
	if (!readable && r.kind != R_BULK) {
		reply_free(&r);
		return -1; /* an error reply: nothing written */
	}
	reply_free(&r);
	if (call(s, 3, set, set_lens, &r) < 0)
		return -1;
	if (r.kind != R_STATUS || !readable)
		rc = -1;
	reply_free(&r);
	if (rc == 0 && old_value != NULL)
		memcpy(old_value, old, strlen(old) + 1);
	return rc;
}

API int kv739_put(char *key, char *value, char *old_value)
{
	if (!printable(key, 1, MAX_KEY) || !printable(value, 0, MAX_VALUE))
		return -1;
	slot *s = acquire();
	if (s == NULL)
		return -1;
	lock();
	int available = g.profile == PROFILE_AVAILABLE;
	unlock();
	if (available) {
		int rc = put_available(s, key, value, old_value);
		release(s);
		return rc;
	}
	char sid[24], seq[24];
	snprintf(sid, sizeof sid, "%llu", (unsigned long long)s->session);
	snprintf(seq, sizeof seq, "%llu", (unsigned long long)s->seq++);
	const char *argv[] = {"CONCORD.SESSION", sid, seq, "SET", key, value, "GET"};
	size_t lens[] = {15, strlen(sid), strlen(seq), 3, strlen(key), strlen(value), 3};
	reply r;
	int rc = -1;
	if (call(s, 7, argv, lens, &r) == 0) {
		if (r.kind == R_NIL)
			rc = 1;
		else if (r.kind == R_BULK)
			rc = copy_value(&r, old_value);
		reply_free(&r);
	}
	release(s);
	return rc;
}

/* given_server copies the init-list server called name into sv, and the
 * deadline of a call starting now into deadline; -1 if there is none. */
static int given_server(const char *name, server *sv, long long *deadline)
{
	int rc = -1;
	if (name == NULL)
		return -1;
	lock();
	for (unsigned i = 0; g.initialized && i < g.nservers && rc < 0; i++)
		if (g.servers[i].given && strcmp(g.servers[i].name, name) == 0) {
			*sv = g.servers[i];
			rc = 0;
		}
	*deadline = conn_now_ms() + g.deadline_ms;
	unlock();
	return rc;
}

/* fault sends a CONCORD.FAULT command to sv on a connection of its own.
 * dropped_ok: a connection that the server closes without an answer counts
 * as success (a server that dies may not answer); one that is silent until
 * the deadline does not (it may never have been asked). */
static int fault(const server *sv, int argc, const char **argv, const size_t *lens, int dropped_ok,
                 long long deadline)
{
	conn c;
	reply r;
	conn_init(&c);
	if (conn_open(&c, sv->host, sv->port, until(deadline, CONNECT_TIMEOUT_MS)) < 0)
		return -1;
	int rc = conn_call(&c, argc, argv, lens, &r, until(deadline, IO_TIMEOUT_MS));
	if (rc < 0)
		return dropped_ok && rc == CONN_DROPPED ? 0 : -1;
	rc = r.kind == R_ERROR ? -1 : 0;
	reply_free(&r);
	conn_close(&c);
	return rc;
}

API int kv739_die(char *server_name, int clean)
{
	server sv;
	long long deadline;
	if (given_server(server_name, &sv, &deadline) < 0)
		return -1;
	const char *mode = clean ? "CLEAN" : "UNCLEAN";
	const char *argv[] = {"CONCORD.FAULT", "DIE", mode};
	size_t lens[] = {13, 3, strlen(mode)};
	return fault(&sv, 3, argv, lens, 1, deadline);
}

API int kv739_partition(char *server_name, char **reachable)
{
	server sv;
	long long deadline;
	int n = 0;
	if (given_server(server_name, &sv, &deadline) < 0 || reachable == NULL)
		return -1;
	while (reachable[n] != NULL && reachable[n][0] != '\0')
		n++;
	if (n > MAX_SERVERS)
		return -1;
	const char *argv[MAX_SERVERS + 2] = {"CONCORD.FAULT", "PARTITION"};
	size_t lens[MAX_SERVERS + 2] = {13, 9};
	for (int i = 0; i < n; i++) {
		argv[i + 2] = reachable[i];
		lens[i + 2] = strlen(reachable[i]);
	}
	return fault(&sv, n + 2, argv, lens, 0, deadline);
}
