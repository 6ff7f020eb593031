#!/usr/bin/env bash
# bench/shardput.sh SHARDS WORKLOAD CLIENTS PORT: a fresh `concord cluster up
# --nodes 3 --shards SHARDS` on ports PORT.. (no HTTP or Redis ports), a
# 16-client warm-up, then `concord bench --workload WORKLOAD --clients
# CLIENTS --conns 10 --keys 10000 --value-size 256 --duration 8s`; prints
# ops/s, p50 and the three servers' CPU per op (/proc/PID/stat utime+stime
# around the run). BIN picks the binary (default bin/concord); CONCORD_*
# variables reach the servers (e.g. CONCORD_RAFT_LOG_KEEP_ENTRIES=1000).
# Used in docs/benchmarks.md ("Per-shard cost of a loop turn", "Where we
# stand against the targets (issue 14, 2026-11-27)"). Not part of make test.
set -u
S=$1 W=$2 C=$3 P=$4
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin/concord}
D=$(mktemp -d)
"$BIN" cluster up --nodes 3 --shards "$S" --base-port "$P" --http-base-port 0 --redis-base-port 0 --data-dir "$D" >"$D/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$D"' EXIT
EP=127.0.0.1:$P,127.0.0.1:$((P + 1)),127.0.0.1:$((P + 2))
for _ in $(seq 60); do
	"$BIN" bench --endpoints "$EP" --workload put --clients 16 --ops 300 -o json >/dev/null 2>&1 && break
	sleep 1
done
pids=$(pgrep -f "data-dir $D/" | tr '\n' ' ')
cpu() { local t=0 a p; for p in $pids; do a=($(cut -d' ' -f14,15 /proc/$p/stat)); t=$((t + a[0] + a[1])); done; echo $t; }
c0=$(cpu)
out=$("$BIN" bench --endpoints "$EP" --workload "$W" --clients "$C" --conns 10 --keys 10000 --value-size 256 --duration 8s -o json 2>/dev/null)
c1=$(cpu)
read -r ops rate p50 < <(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["ops"], round(d["throughput_ops_per_sec"]), d["latency_ms"]["p50"])')
hz=$(getconf CLK_TCK)
echo "shards=$S $W c$C ops/s=$rate p50=$p50 server_us_per_op=$(python3 -c "print(round(($c1 - $c0) * 1e6 / $hz / $ops, 1))")"
