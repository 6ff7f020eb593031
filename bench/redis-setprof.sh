#!/usr/bin/env bash
# bench/redis-setprof.sh BIN TAG BASEPORT [via]: the Redis run 8 measurement
# of docs/benchmarks.md (issue 12, pipelined SET) for one concord binary.
# Starts a fresh 3-node cluster of BIN (16 shards, 3 replicas, fsync on;
# ports BASEPORT+1..3 gRPC, +11..13 RESP, +21..23 HTTP, +31..33 pprof; logs
# and profiles in /tmp/redis-setprof-TAG), waits until the scheduler's
# start-up leader moves are over (every node leads 5 or 6 shards), warms
# with 20,000 pipelined SETs, finds the node leading the shard of
# redis-benchmark's one key (the one whose proposal count grows under
# unpipelined SETs), then runs
#   redis-benchmark -t ${T:-set} -n ${N:-300000} -c ${C:-50} -d 256 -P 16 --csv
# (T picks another redis-benchmark test, e.g. incr; "SETs" below are then its commands.)
# (with R set, -r $R as well: random keys, so about two thirds of the SETs
# land in shards the Redis node does not lead and are forwarded)
# through that node (via=leader, the default) or another (via=nonleader)
# while it takes a 10 s CPU profile of every node and an allocation profile
# (delta) of the Redis node (PROFILE=0 skips them).
# Prints the result, the servers' CPU per SET (utime+stime of the three
# processes from /proc/PID/stat, fields 14+15, around the run), each node's
# CPU, proposals (raft entries it proposed), loop turns (storage commits)
# and fsyncs (synced commits) per second of the run, and the SETs per entry.
set -euo pipefail
BIN=$1 TAG=$2 B=$3 VIA=${4:-leader}
N=${N:-300000}
R=${R:-}
PROFILE=${PROFILE:-1}
RB=${RB:-redis-benchmark}
RC=${RC:-redis-cli}
DIR=/tmp/redis-setprof-$TAG
rm -rf "$DIR" && mkdir -p "$DIR"
. "$(dirname "$0")/rcluster.sh" # PEERS, PIDS; the nodes stop at exit
cpu1() { local s; s=($(cut -d' ' -f14,15 /proc/$1/stat)); echo $((s[0] + s[1])); }
# sysc PID: the read- and write-type syscalls PID has made (/proc/PID/io).
sysc() { awk '/^syscr/ { r = $2 } /^syscw/ { w = $2 } END { print r, w }' /proc/$1/io; }
# metric NODE REGEX: the sum of the samples matching REGEX on NODE's /metrics.
metric() { curl -s http://127.0.0.1:$((B+20+$1))/metrics | awk -v re="$2" '$0 ~ re { s += $2 } END { printf "%d\n", s }'; }
props() { metric "$1" '^concord_proposal_duration_seconds_count'; }
turns() { metric "$1" '^concord_storage_commit_duration_seconds_count'; }
syncs() { metric "$1" '^concord_storage_commit_duration_seconds_count\\{synced="true"'; }
# syncus NODE: the synced commits' summed time on NODE, in µs.
syncus() { curl -s http://127.0.0.1:$((B+20+$1))/metrics | awk '/^concord_storage_commit_duration_seconds_sum\{synced="true"/ { s += $2 } END { printf "%d\n", s * 1e6 }'; }
wait_balanced
sleep 3
"$RB" -p $((B+11)) -t "${T:-set}" -n 20000 -c 50 -d 256 -P 16 -q >/dev/null 2>&1 # warm-up
a=($(props 1) $(props 2) $(props 3))
"$RB" -p $((B+11)) -t "${T:-set}" -n 5000 -c 10 -d 256 -P 1 -q >/dev/null 2>&1 # which node proposes the one key's SETs
b=($(props 1) $(props 2) $(props 3))
L=1 best=0
for i in 0 1 2; do d=$((b[i] - a[i])); if [ $d -gt $best ]; then best=$d L=$((i + 1)); fi; done
P=$L
[ "$VIA" = leader ] || P=$((L % 3 + 1))
hz=$(getconf CLK_TCK)
declare -A c0 c1 p0 p1 t0 t1 s0 s1 u0 u1 r0 r1 w0 w1
for i in 1 2 3; do read -r r0[$i] w0[$i] < <(sysc ${PIDS[$((i-1))]}); done
for i in 1 2 3; do c0[$i]=$(cpu1 ${PIDS[$((i-1))]}); p0[$i]=$(props $i); t0[$i]=$(turns $i); s0[$i]=$(syncs $i); u0[$i]=$(syncus $i); done
start=$(date +%s.%N)
"$RB" -p $((B+10+P)) -t "${T:-set}" -n "$N" -c "${C:-50}" -d 256 -P 16 ${R:+-r "$R"} --csv >"$DIR/rb.csv" 2>&1 &
RBPID=$!
CURLS=()
if [ "$PROFILE" = 1 ]; then
	sleep 0.3
	for i in 1 2 3; do curl -s -o "$DIR/cpu-n$i.out" "http://127.0.0.1:$((B+30+i))/debug/pprof/profile?seconds=10" & CURLS+=($!); done
	curl -s -o "$DIR/allocs-n$P.out" "http://127.0.0.1:$((B+30+P))/debug/pprof/allocs?seconds=10" & CURLS+=($!)
fi
wait $RBPID
end=$(date +%s.%N)
for i in 1 2 3; do read -r r1[$i] w1[$i] < <(sysc ${PIDS[$((i-1))]}); done
for i in 1 2 3; do c1[$i]=$(cpu1 ${PIDS[$((i-1))]}); p1[$i]=$(props $i); t1[$i]=$(turns $i); s1[$i]=$(syncs $i); u1[$i]=$(syncus $i); done
for p in "${CURLS[@]}"; do wait "$p"; done # the profiles
secs=$(echo "$end - $start" | bc -l)
tot=0
for i in 1 2 3; do tot=$((tot + c1[$i] - c0[$i])); done
echo "$TAG via=$VIA r=${R:-none} leader=n$L redis-node=n$P load=$(cut -d' ' -f1 /proc/loadavg) $(tail -1 "$DIR/rb.csv") cpu_us_per_set=$(echo "$tot * 1000000 / $hz / $N" | bc -l | xargs printf %.2f)"
for i in 1 2 3; do
	dp=$((p1[$i] - p0[$i]))
	printf '%s n%d cpu=%.2fs proposals=%d (%.1f SETs/entry) turns/s=%.0f fsyncs/s=%.0f (synced commit %.0f µs) read/write syscalls per 1000 SETs %.1f/%.1f\n' "$TAG" $i \
		"$(echo "(${c1[$i]} - ${c0[$i]}) / $hz" | bc -l)" $dp "$(echo "if ($dp > 0) $N / $dp else 0" | bc -l)" \
		"$(echo "(${t1[$i]} - ${t0[$i]}) / $secs" | bc -l)" "$(echo "(${s1[$i]} - ${s0[$i]}) / $secs" | bc -l)" \
		"$(echo "if (${s1[$i]} > ${s0[$i]}) (${u1[$i]} - ${u0[$i]}) / (${s1[$i]} - ${s0[$i]}) else 0" | bc -l)" \
		"$(echo "(${r1[$i]} - ${r0[$i]}) * 1000 / $N" | bc -l)" "$(echo "(${w1[$i]} - ${w0[$i]}) * 1000 / $N" | bc -l)"
done
echo "$TAG run took ${secs}s; profiles in $DIR"
