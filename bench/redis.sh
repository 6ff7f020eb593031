#!/usr/bin/env bash
# make bench-redis: redis-benchmark -t set,get,incr,mset -n 200000 -c 50
# -d 256, with -P 1 and -P 16, one test per invocation, against a 3-node
# Concord cluster's Redis port and, in the same run, redis-server with
# appendfsync everysec and always (bench/redisbench). Prints a markdown
# table (requests/s, p50, the servers' CPU per request, ratio to Redis
# everysec), also written to bench-out/redis/table.md; raw output, JSON
# and the servers' logs are in bench-out/redis/. bench/peers.sh installs
# redis-server and redis-benchmark when missing.
# REDIS_BENCH_N, _C, _D override -n, -c, -d; REDIS_BENCH_TESTS the -t list;
# REDIS_BENCH_R=n adds -r n (random keys: without it every SET, GET and INCR
# of redis-benchmark hits one key, and Concord runs a pipeline's commands on
# one key in order, one after another); REDIS_BENCH_SYSTEMS picks systems
# (default concord,redis-everysec,redis-always); REDIS_BENCH_P the -P list
# (default 1,16); REDIS_BENCH_WARMUP=false measures each system cold (by
# default each first runs every test once, unmeasured, and Concord waits
# for its start-up leader balancing: bench/redisbench/warmup.go).
set -euo pipefail
cd "$(dirname "$0")/.."
./bench/peers.sh redis
OUT=$PWD/bench-out/redis
rm -rf "$OUT" && mkdir -p "$OUT"
exec go run ./bench/redisbench -out "$OUT" -concord bin/concord -peers .cache/peers/bin \
	-n "${REDIS_BENCH_N:-200000}" -c "${REDIS_BENCH_C:-50}" -d "${REDIS_BENCH_D:-256}" \
	-r "${REDIS_BENCH_R:-0}" -tests "${REDIS_BENCH_TESTS:-set,get,incr,mset}" \
	-systems "${REDIS_BENCH_SYSTEMS:-concord,redis-everysec,redis-always}" -pipelines "${REDIS_BENCH_P:-1,16}" \
	-warmup="${REDIS_BENCH_WARMUP:-true}"
