#!/usr/bin/env bash
# make bench-kv739: the RecoverKV report's client experiments through the
# CS739 C API (lib739kv), next to the same load through the Go client
# (`concord bench --target concord`) and through redis-benchmark on a node's
# Redis port: puts and gets of 16-byte keys and 256-byte values, 1, 4, 16
# and 64 client threads, each doing one request at a time. One local
# 3-node cluster (fsync on); its logs are in bench-out/kv739/.
# KV739_BENCH_OPS sets the requests per thread (default 2000);
# KV739_BENCH_THREADS the thread counts.
set -euo pipefail
cd "$(dirname "$0")/.."
OPS=${KV739_BENCH_OPS:-2000}
THREADS=${KV739_BENCH_THREADS:-1 4 16 64}
OUT=$PWD/bench-out/kv739
rm -rf "$OUT" && mkdir -p "$OUT"
make -s lib
gcc -O2 -Iinclude kv739/bench/kv739_bench.c -Llib -l739kv -Wl,-rpath,"$PWD/lib" -lpthread -o "$OUT/kv739_bench"
EP=127.0.0.1:27201,127.0.0.1:27202,127.0.0.1:27203
bin/concord cluster up --nodes 3 --base-port 27201 --redis-base-port 26480 --data-dir "$OUT/data" \
	> "$OUT/cluster.log" 2>&1 &
CLUSTER=$!
trap 'kill -TERM $CLUSTER 2>/dev/null; wait $CLUSTER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
	"$OUT/kv739_bench" put 1 64 ${EP//,/ } >/dev/null 2>&1 && break
	sleep 0.5
done
for op in put get; do
	for t in $THREADS; do
		echo "lib739kv:       $("$OUT/kv739_bench" "$op" "$t" "$OPS" ${EP//,/ })"
		json=$(bin/concord bench --endpoints "$EP" --workload "$op" --clients "$t" --conns "$t" \
			--ops $((t * OPS)) --keys $((t * 1000)) -o json)
		echo "go client:      $op threads=$t $(echo "$json" | python3 -c 'import json,sys
r=json.load(sys.stdin); l=r["latency_ms"]
print("ops_per_sec=%.0f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f" % (r["throughput_ops_per_sec"], l["p50"], l["p90"], l["p99"], l["p999"]))')"
		if command -v redis-benchmark >/dev/null; then
			rt=$([ "$op" = put ] && echo set || echo get)
			echo "redis-benchmark: $op threads=$t $(redis-benchmark -p 26480 -t "$rt" -n $((t * OPS)) -c "$t" -d 256 -r $((t * 1000)) --csv | tail -n 1)"
		fi
	done
done
