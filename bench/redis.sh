#!/usr/bin/env bash
# make bench-redis: redis-benchmark against a local 3-node Concord cluster's
# Redis ports, unpipelined (-P 1) and pipelined (-P 16). Installs
# redis-benchmark with apt when missing (as bench/peers.sh does). Prints
# redis-benchmark's CSV; the cluster's logs are in bench-out/redis/.
# REDIS_BENCH_N, _C, _D override -n, -c, -d; REDIS_BENCH_TESTS the -t list;
# REDIS_BENCH_R=n adds -r n (random keys: without it every SET, GET and INCR
# of redis-benchmark hits one key, and Concord runs a pipeline's commands on
# one key in order, one after another).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${REDIS_BENCH_N:-200000}
C=${REDIS_BENCH_C:-50}
D=${REDIS_BENCH_D:-256}
TESTS=${REDIS_BENCH_TESTS:-set,get,incr,mset}
R=${REDIS_BENCH_R:+-r $REDIS_BENCH_R}
OUT=$PWD/bench-out/redis
if ! command -v redis-benchmark >/dev/null; then
	echo "bench-redis: installing redis-tools with apt..."
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-tools >/dev/null
fi
rm -rf "$OUT" && mkdir -p "$OUT"
# Ports: gRPC 27101-27103, Redis 26380-26382.
bin/concord cluster up --nodes 3 --base-port 27101 --redis-base-port 26380 --data-dir "$OUT/data" \
	> "$OUT/cluster.log" 2>&1 &
CLUSTER=$!
trap 'kill -TERM $CLUSTER 2>/dev/null; wait $CLUSTER 2>/dev/null || true' EXIT
# Ready when writes to 64 keys (every shard, very likely) succeed.
ready() {
	for i in $(seq 0 63); do
		[ "$(redis-cli -p 26380 SET "bench:ready:$i" 1 2>/dev/null)" = OK ] || return 1
	done
}
for _ in $(seq 1 120); do
	if ready; then break; fi
	sleep 0.5
done
ready || { echo "bench-redis: cluster not ready"; tail -n 50 "$OUT/cluster.log"; exit 1; }
for P in 1 16; do
	echo "# redis-benchmark -h 127.0.0.1 -p 26380 -t $TESTS -n $N -c $C -d $D -P $P $R --csv"
	# shellcheck disable=SC2086
	redis-benchmark -h 127.0.0.1 -p 26380 -t "$TESTS" -n "$N" -c "$C" -d "$D" -P "$P" $R --csv
done
