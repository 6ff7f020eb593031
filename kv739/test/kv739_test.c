/*
 * kv739_test.c — the CS739 API against a live Concord cluster. Run by
 * tests/kv739 (which builds it and the library with AddressSanitizer,
 * starts a supervised 3-node cluster with fault injection and a proxy that
 * drops one answer) as:
 *
 *     kv739_test PROXY S1 S2 S3
 *
 * Every check prints "FAIL <what>" and exits 1 on failure; the last line
 * is "OK" on success.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv739.h"

#define CHECK(c, ...)                                                         \
	do {                                                                  \
		if (!(c)) {                                                   \
			printf("FAIL line %d: ", __LINE__);                  \
			printf(__VA_ARGS__);                                  \
			printf("\n");                                         \
			exit(1);                                              \
		}                                                             \
	} while (0)

static char *proxy, *s1, *s2, *s3;
static char prefix[32]; /* keys of this run: reruns never see old values */

static char *key(const char *name)
{
	static __thread char buf[8][160];
	static __thread int next;
	char *k = buf[next++ % 8];
	snprintf(k, 160, "%s-%s", prefix, name);
	return k;
}

static void init_all(void)
{
	char *all[] = {s1, s2, s3, NULL};
	CHECK(kv739_init(all) == 0, "init with every server");
}

static void before_init(void)
{
	char v[2049], old[2049];
	CHECK(kv739_get("k", v) == -1, "get before init");
	CHECK(kv739_put("k", "v", old) == -1, "put before init");
	CHECK(kv739_shutdown() == -1, "shutdown before init");
	CHECK(kv739_die(s1, 0) == -1, "die before init");
}

static void init_validation(void)
{
	char *bad[][3] = {
	    {"", NULL, NULL},
	    {"nocolon", NULL, NULL},
	    {"127.0.0.1:1:2", NULL, NULL},
	    {"127.0.0.1:0", NULL, NULL},
	    {"127.0.0.1:65536", NULL, NULL},
	    {"127.0.0.1:12a", NULL, NULL},
	    {"127.0.0.1:", NULL, NULL},
	    {":6379", NULL, NULL},
	    {"no-such-host.invalid:6379", NULL, NULL},
	    {s1, "bad name", NULL},
	};
	char v[2049];
	CHECK(kv739_init(NULL) == -1, "init(NULL)");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK(kv739_init(bad[i]) == -1, "init with '%s' '%s' must fail", bad[i][0], bad[i][1] ? bad[i][1] : "");
		CHECK(kv739_get("k", v) == -1, "a failed init initialises nothing");
	}
	char *empty_ends[] = {s1, "", "garbage", NULL};
	CHECK(kv739_init(empty_ends) == 0, "an empty string ends the list");
	CHECK(kv739_init(empty_ends) == 0, "init again re-initialises");
	CHECK(kv739_shutdown() == 0, "shutdown");
	CHECK(kv739_shutdown() == -1, "second shutdown");
}

static void return_codes(void)
{
	char v[2049], old[2049];
	CHECK(kv739_get(key("absent"), v) == 1, "get of an absent key");
	CHECK(kv739_put(key("a"), "one", old) == 1, "first put: no old value");
	CHECK(kv739_put(key("a"), "two", old) == 0 && strcmp(old, "one") == 0, "second put returns the old value (got '%s')", old);
	CHECK(kv739_get(key("a"), v) == 0 && strcmp(v, "two") == 0, "get returns the value (got '%s')", v);
	CHECK(kv739_put(key("empty"), "", old) == 1, "put of an empty value");
	CHECK(kv739_get(key("empty"), v) == 0 && v[0] == '\0', "get of an empty value");
	CHECK(kv739_put(key("null-old"), "x", NULL) == 1, "put with a NULL old_value buffer");
}

static void validation(void)
{
	char v[2049], old[2049], big[3000], k128[129], k129[130];
	memset(k128, 'k', 128);
	k128[128] = '\0';
	memset(k129, 'k', 129);
	k129[129] = '\0';
	memset(big, 'v', sizeof big);
	big[2048] = '\0';
	CHECK(kv739_put(k128, big, old) >= 0, "128-byte key and 2,048-byte value are allowed");
	CHECK(kv739_get(k128, v) == 0 && strlen(v) == 2048, "2,048-byte value read back");
	big[2048] = 'v';
	big[2049] = '\0';
	CHECK(kv739_put(key("big"), big, old) == -1, "2,049-byte value");
	CHECK(kv739_get(key("big"), v) == 1, "a refused put stores nothing");
	CHECK(kv739_put(k129, "v", old) == -1, "129-byte key");
	CHECK(kv739_get(k129, v) == -1, "get of a 129-byte key");
	CHECK(kv739_put("", "v", old) == -1, "empty key");
	CHECK(kv739_get("", v) == -1, "get of an empty key");
	const char *bad_keys[] = {"a[b", "a]b", "tab\tkey", "nl\nkey", "del\x7fkey", "hi\x80"};
	for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
		CHECK(kv739_put((char *)bad_keys[i], "v", old) == -1, "put with bad key %zu", i);
		CHECK(kv739_get((char *)bad_keys[i], v) == -1, "get with bad key %zu", i);
	}
	const char *bad_values[] = {"a[b", "a]b", "line\n", "\x01"};
	for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++) {
		CHECK(kv739_put(key("badval"), (char *)bad_values[i], old) == -1, "put with bad value %zu", i);
		CHECK(kv739_get(key("badval"), v) == 1, "a put with a bad value stores nothing");
	}
	CHECK(kv739_put(NULL, "v", old) == -1, "NULL key");
	CHECK(kv739_put(key("n"), NULL, old) == -1, "NULL value");
	CHECK(kv739_get(key("n"), NULL) == -1, "NULL value buffer");
}

static void *worker(void *arg)
{
	long id = (long)arg;
	char k[64], want[64], v[2049], old[2049];
	for (int i = 0; i < 100; i++) {
		snprintf(k, sizeof k, "%s-t%ld-%d", prefix, id, i % 10);
		snprintf(want, sizeof want, "v%ld-%d", id, i);
		int rc = kv739_put(k, want, old);
		CHECK(rc == (i < 10 ? 1 : 0), "thread %ld put %d returned %d", id, i, rc);
		CHECK(kv739_get(k, v) == 0 && strcmp(v, want) == 0, "thread %ld read its own write", id);
	}
	return NULL;
}

static void threads(void)
{
	pthread_t t[8];
	for (long i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

static void fork_both_sides(void)
{
	char v[2049], old[2049];
	CHECK(kv739_put(key("before-fork"), "parent", old) >= 0, "put before fork");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		/* The child uses the library at once, on its own connections. */
		if (kv739_get(key("before-fork"), v) != 0 || strcmp(v, "parent") != 0)
			_exit(2);
		if (kv739_put(key("from-child"), "child", old) != 1)
			_exit(3);
		_exit(kv739_shutdown() == 0 ? 0 : 4);
	}
	/* The parent keeps going meanwhile, on the connections it had. */
	for (int i = 0; i < 20; i++)
		CHECK(kv739_put(key("parent-during-fork"), "p", old) >= 0, "parent put while the child runs");
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", WEXITSTATUS(status));
	CHECK(kv739_get(key("from-child"), v) == 0 && strcmp(v, "child") == 0, "child's write seen by the parent");
}

static void cycles(void)
{
	char v[2049];
	CHECK(kv739_shutdown() == 0, "shutdown before cycles");
	for (int i = 0; i < 1000; i++) {
		init_all();
		if (i % 50 == 0)
			CHECK(kv739_get(key("a"), v) == 0, "get in cycle %d", i);
		CHECK(kv739_shutdown() == 0, "shutdown in cycle %d", i);
	}
	init_all();
}

/* retried_put: the proxy (the only server of this init) forwards the first
 * session put it sees and drops the connection instead of relaying the
 * answer. The library must retry with the same session and sequence, and
 * get the first answer back: the old value from before this put. */
static void retried_put(void)
{
	char v[2049], old[2049];
	char *via[] = {proxy, NULL};
	CHECK(kv739_put(key("retry"), "first", old) == 1, "put before the dropped answer");
	CHECK(kv739_init(via) == 0, "init through the proxy");
	CHECK(kv739_put(key("retry"), "second", old) == 0, "put whose answer is dropped");
	CHECK(strcmp(old, "first") == 0, "retried put applied twice: old value '%s', want 'first'", old);
	init_all();
	CHECK(kv739_get(key("retry"), v) == 0 && strcmp(v, "second") == 0, "value after the retried put");
}

/* get_until polls kv739_get of k, every 100 ms for up to 60 s, until it
 * reads want: 0, or -1 if it never did. */
static int get_until(char *k, const char *want)
{
	char v[2049];
	for (int i = 0; i < 600; i++) {
		if (kv739_get(k, v) == 0 && strcmp(v, want) == 0)
			return 0;
		usleep(100 * 1000);
	}
	return -1;
}

/* available_profile: KV739_CONSISTENCY=available is a profile (junk still
 * makes init fail); under it a put answers as usual and, with every server
 * cut off from the others (no shard has a quorum anywhere), still succeeds:
 * the server held it as a tentative write. Once healed, the write is
 * reconciled and a linearizable get sees it. */
static void available_profile(void)
{
	char old[2049];
	char *all[] = {s1, s2, s3, NULL}, *none[] = {NULL};
	setenv("KV739_CONSISTENCY", "junk", 1);
	CHECK(kv739_init(all) == -1, "init with KV739_CONSISTENCY=junk");
	setenv("KV739_CONSISTENCY", "available", 1);
	CHECK(kv739_init(all) == 0, "init with KV739_CONSISTENCY=available");
	/* Available gets (and a put's old value) read the server's replica,
	 * which may be a moment behind a committed put: poll. */
	CHECK(kv739_put(key("avail"), "one", old) == 1, "available put: no old value");
	CHECK(get_until(key("avail"), "one") == 0, "available get never read 'one'");
	CHECK(kv739_put(key("avail"), "two", old) == 0 && strcmp(old, "one") == 0, "available put returns the old value (got '%s')", old);
	CHECK(get_until(key("avail"), "two") == 0, "available get never read 'two'");

	CHECK(kv739_partition(s1, none) == 0 && kv739_partition(s2, none) == 0 && kv739_partition(s3, none) == 0,
	      "cut every server off");
	CHECK(kv739_put(key("avail-cut"), "held", old) == 1, "available put with no quorum anywhere");
	char *heal1[] = {s2, s3, NULL}, *heal2[] = {s1, s3, NULL}, *heal3[] = {s1, s2, NULL};
	CHECK(kv739_partition(s1, heal1) == 0 && kv739_partition(s2, heal2) == 0 && kv739_partition(s3, heal3) == 0,
	      "heal every server");

	unsetenv("KV739_CONSISTENCY");
	init_all();
	/* The reconciler proposes it once its shard has a quorum. */
	CHECK(get_until(key("avail-cut"), "held") == 0, "the held put never reached a linearizable get");
}

/* others_of fills out with the servers other than s, NULL-terminated. */
static void others_of(char *s, char **out)
{
	int n = 0;
	char *all[] = {s1, s2, s3};
	for (int i = 0; i < 3; i++)
		if (all[i] != s)
			out[n++] = all[i];
	out[n] = NULL;
}

/* wait_down waits until server s, asked to die, has gone down: it no longer
 * answers a fault command (a partition that lets it reach every other
 * server, which changes nothing once healed). A get would not tell: the
 * library also uses the members it learned. The dying process may answer
 * for a moment (a clean death drains first); the supervisor keeps a dead
 * node down for 500 ms before restarting it, so polling every 50 ms right
 * after the die sees it down. Anything slower between the die and the
 * first poll could miss the whole outage: a put while a server is dead
 * waits out an election when that server led its shard, which took longer
 * than 500 ms under make test's load. wait_up then waits until it answers
 * again. */
static void wait_down(char *s)
{
	char *others[3];
	others_of(s, others);
	int rc = 0;
	for (int i = 0; i < 400 && rc == 0; i++) {
		rc = kv739_partition(s, others);
		if (rc == 0)
			usleep(50 * 1000);
	}
	CHECK(rc != 0, "server %s never went down", s);
}

static void wait_up(char *s)
{
	char *others[3];
	others_of(s, others);
	int rc = -1;
	for (int i = 0; i < 600 && rc != 0; i++) {
		rc = kv739_partition(s, others);
		if (rc != 0)
			usleep(100 * 1000);
	}
	CHECK(rc == 0, "server %s never came back", s);
}

static void faults(void)
{
	char v[2049], old[2049];
	char *none[] = {NULL};
	CHECK(kv739_die("127.0.0.1:1", 1) == -1, "die of a server not in the init list");
	CHECK(kv739_partition("127.0.0.1:1", none) == -1, "partition of a server not in the init list");

	CHECK(kv739_partition(s1, none) == 0, "isolate s1");
	CHECK(kv739_put(key("during-partition"), "x", old) == 1, "put while s1 is isolated");
	char *others[] = {s2, s3, NULL};
	CHECK(kv739_partition(s1, others) == 0, "heal s1");

	CHECK(kv739_die(s3, 0) == 0, "unclean die of s3");
	wait_down(s3);
	CHECK(kv739_put(key("s3-dead"), "x", old) == 1, "put while s3 is dead");
	wait_up(s3);
	CHECK(kv739_die(s2, 1) == 0, "clean die of s2");
	wait_down(s2);
	CHECK(kv739_put(key("s2-dead"), "x", old) == 1, "put while s2 is dead");
	wait_up(s2);

	/* Every server restarts; what was acknowledged is still there. */
	CHECK(kv739_put(key("durable"), "kept", old) == 1, "put before every server dies");
	CHECK(kv739_die(s1, 0) == 0 && kv739_die(s2, 0) == 0 && kv739_die(s3, 0) == 0, "unclean die of every server");
	CHECK(kv739_get(key("durable"), v) == 0 && strcmp(v, "kept") == 0, "acknowledged put lost across a restart of every server");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 5) {
		fprintf(stderr, "usage: %s PROXY S1 S2 S3\n", argv[0]);
		return 2;
	}
	proxy = argv[1], s1 = argv[2], s2 = argv[3], s3 = argv[4];
	snprintf(prefix, sizeof prefix, "c%ld-%d", (long)time(NULL), (int)getpid());
	before_init();
	init_validation();
	init_all();
	return_codes();
	validation();
	threads();
	fork_both_sides();
	cycles();
	retried_put();
	available_profile();
	faults();
	CHECK(kv739_shutdown() == 0, "final shutdown");
	printf("OK\n");
	return 0;
}
