#!/usr/bin/env bash
# bench/redis-msetprof.sh BIN TAG BASEPORT R: a fresh 3-node cluster of BIN
# (bench/rcluster.sh; logs and profiles in /tmp/redis-msetprof-TAG), warmed
# with 20,000 pipelined SETs of random keys; then redis-benchmark -t mset
# -r R (0: its one key) -n ${N:-60000} -c 50 -d 256 -P 16 through node 1 while
# a 10 s CPU profile of each node is taken. Prints the result, the three
# nodes' CPU per MSET (/proc/PID/stat utime+stime around the run), and each
# node's concord_writes_absorbed_total and proposal count (docs/benchmarks.md,
# Redis run 10).
set -euo pipefail
BIN=$1 TAG=$2 B=$3 R=$4
N=${N:-60000}
DIR=/tmp/redis-msetprof-$TAG
rm -rf "$DIR" && mkdir -p "$DIR"
. "$(dirname "$0")/rcluster.sh" # PEERS, PIDS; the nodes stop at exit
cpu1() { local s; s=($(cut -d' ' -f14,15 /proc/$1/stat)); echo $((s[0] + s[1])); }
wait_balanced
redis-benchmark -p $((B+11)) -t set -n 20000 -c 50 -d 256 -P 16 -r 100000 -q >/dev/null 2>&1
c0=0; for p in "${PIDS[@]}"; do c0=$((c0 + $(cpu1 $p))); done
redis-benchmark -p $((B+11)) -t mset -n "$N" -c 50 -d 256 -P 16 -r "$R" --csv >"$DIR/rb.csv" 2>&1 &
RBPID=$!
sleep 0.5
CURLS=()
for i in 1 2 3; do curl -s -o "$DIR/cpu-n$i.out" "http://127.0.0.1:$((B+30+i))/debug/pprof/profile?seconds=10" & CURLS+=($!); done
wait $RBPID
c1=0; for p in "${PIDS[@]}"; do c1=$((c1 + $(cpu1 $p))); done
for p in "${CURLS[@]}"; do wait "$p"; done
hz=$(getconf CLK_TCK)
echo "$TAG r=$R load=$(cut -d' ' -f1 /proc/loadavg) $(tail -1 "$DIR/rb.csv") cpu_us_per_mset=$(echo "($c1 - $c0) * 1000000 / $hz / $N" | bc -l | xargs printf %.1f)"
for i in 1 2 3; do curl -s "http://127.0.0.1:$((B+20+i))/metrics" | grep -E '^concord_writes_absorbed_total|^concord_proposal_duration_seconds_count' | sed "s/^/n$i /"; done
