#!/usr/bin/env bash
# bench/redis-ab.sh BIN TAG BASEPORT: the Redis run 6 measurement of
# docs/benchmarks.md for one concord binary. Starts a fresh 3-node cluster
# of BIN (16 shards, 3 replicas, fsync on; ports BASEPORT+1..3 gRPC,
# +11..13 RESP, +21..23 HTTP, +31..33 pprof; logs in /tmp/redis-ab-TAG),
# waits until the scheduler's start-up leader moves are over (every node
# leads 5 or 6 shards), finds the node leading the shard of
# redis-benchmark's one key, then runs redis-benchmark -P 16 -c 50
# -n 200000 -d 256: SET and GET through that node, SET and GET through
# another, and SET of random keys (-r 100000) through node 1. Prints one
# CSV line per run with the servers' CPU per request (utime+stime of the
# three processes from /proc/PID/stat, fields 14+15, around the run) and
# the load average, then stops the cluster. Run it for two binaries in
# turn, twice, on a box as quiet as you can get.
set -euo pipefail
BIN=$1 TAG=$2 B=$3
DIR=/tmp/redis-ab-$TAG
rm -rf "$DIR" && mkdir -p "$DIR"
. "$(dirname "$0")/rcluster.sh" # PEERS, PIDS; the nodes stop at exit
cpu() { local t=0 s; for p in "${PIDS[@]}"; do s=($(cut -d' ' -f14,15 /proc/$p/stat)); t=$((t + s[0] + s[1])); done; echo $t; }
props() { for i in 1 2 3; do curl -s http://127.0.0.1:$((B+20+i))/metrics | awk '/^concord_proposal_duration_seconds_count\{outcome="ok"/ {print $2}'; done; }
wait_balanced
sleep 3
redis-benchmark -p $((B+11)) -t set -n 20000 -c 50 -d 256 -P 16 -r 100000 -q >/dev/null 2>&1 # warm-up
a=($(props))
redis-benchmark -p $((B+11)) -t set -n 5000 -c 10 -d 256 -P 1 -q >/dev/null 2>&1 # which node proposes the one key's SETs
b=($(props))
L=1 best=0
for i in 0 1 2; do d=$((b[i] - a[i])); if [ $d -gt $best ]; then best=$d L=$((i + 1)); fi; done
N=$((L % 3 + 1))
hz=$(getconf CLK_TCK)
run() { # port label test [extra]
	local c0 c1 out
	c0=$(cpu)
	out=$(redis-benchmark -p "$1" -t "$3" -n 200000 -c 50 -d 256 -P 16 ${4:-} --csv | tail -1)
	c1=$(cpu)
	echo "$TAG,$2,$out,cpu_us_per_op=$(((c1 - c0) * 1000000 / hz / 200000)),load=$(cut -d' ' -f1 /proc/loadavg)"
}
run $((B+10+L)) "leader(n$L)" set
run $((B+10+L)) "leader(n$L)" get
run $((B+10+N)) "nonleader(n$N)" set
run $((B+10+N)) "nonleader(n$N)" get
run $((B+11)) node1-random set "-r 100000"
echo "$TAG proposals (ok) per node: $(props | tr '\n' ' ')"
