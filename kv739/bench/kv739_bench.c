/*
 * kv739_bench.c — the RecoverKV report's client experiments through the
 * CS739 API: T threads each doing N puts (or gets) of 16-byte keys and
 * 256-byte values, one at a time; prints throughput and the latency
 * percentiles. Built and run by bench/kv739.sh (make bench-kv739).
 *
 *     kv739_bench put|get THREADS OPS_PER_THREAD SERVER...
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv739.h"

static int threads, ops, do_put;
static double *lat; /* microseconds, threads*ops of them */
static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	char key[32], value[257], out[2049];
	memset(value, 'v', 256);
	value[256] = '\0';
	int failed = 0;
	for (int i = 0; i < ops; i++) {
		snprintf(key, sizeof key, "b%03ld-%011d", id, i % 1000);
		double t0 = now_us();
		int rc = do_put ? kv739_put(key, value, out) : kv739_get(key, out);
		lat[id * ops + i] = now_us() - t0;
		failed += rc < 0;
	}
	pthread_mutex_lock(&mu);
	failures += failed;
	pthread_mutex_unlock(&mu);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s put|get THREADS OPS_PER_THREAD SERVER...\n", argv[0]);
		return 2;
	}
	do_put = strcmp(argv[1], "put") == 0;
	threads = atoi(argv[2]);
	ops = atoi(argv[3]);
	if (threads < 1 || ops < 1 || kv739_init(argv + 4) != 0) {
		fprintf(stderr, "bad arguments or servers\n");
		return 2;
	}
	lat = calloc((size_t)threads * ops, sizeof *lat);
	if (!do_put) { /* the keys a get reads: 1,000 per thread */
		char key[32], value[257], out[2049];
		memset(value, 'v', 256);
		value[256] = '\0';
		for (long id = 0; id < threads; id++)
			for (int i = 0; i < 1000 && i < ops; i++) {
				snprintf(key, sizeof key, "b%03ld-%011d", id, i);
				kv739_put(key, value, out);
			}
	}
	pthread_t *t = calloc((size_t)threads, sizeof *t);
	double t0 = now_us();
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double secs = (now_us() - t0) / 1e6;
	size_t n = (size_t)threads * ops;
	qsort(lat, n, sizeof *lat, cmp);
	printf("%s threads=%d ops=%zu ops_per_sec=%.0f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f failures=%d\n",
	       argv[1], threads, n, n / secs, lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3, lat[n * 99 / 100] / 1e3,
	       lat[n * 999 / 1000] / 1e3, lat[n - 1] / 1e3, failures);
	kv739_shutdown();
	free(lat);
	free(t);
	return failures ? 1 : 0;
}
