#!/usr/bin/env bash
# Profiles real `concord server` processes under load: starts a 3-node
# cluster on 127.0.0.1 (ports from $BASE, default 27701; pprof on BASE+10..),
# then for each workload runs `concord bench` while it captures a CPU profile
# of every node and an allocation profile (delta over the run) of node 1.
# Output in $OUT (default bench-out/profile): <run>-cpu-n<i>.out,
# <run>-allocs-n1.out, <run>.json (the bench result), <run>-frames.txt (raft
# frames and messages each node sent and received per second, from /metrics
# on BASE+20..), <run>-cache.txt (each node's Pebble block cache hits and
# misses per second over the same window), <run>-turns.txt (each node's
# loop turns (storage commits), Ready cycles and batch records per second),
# servers' logs. RUNS picks runs (default: put100 get100 put1 get1;
# get100warm, after get100, profiles gets with no preload in the window;
# ycsba100 and ycsbc100: YCSB A and C at 100 clients, C without a preload;
# put100tcp and get100warmtcp: the same over the client's framed TCP wire, and
# put100grpc and get100warmgrpc over its gRPC stream; the runs without a wire
# in their name use the client's default, the framed TCP wire since issue 14,
# the gRPC stream before, so older profiles of them are gRPC's).
# Read with: go tool pprof -top bin/concord bench-out/profile/put100-cpu-n1.out
# BIN picks the binary (default bin/concord). SHARDS sets the servers'
# --shards (default: the server's default, 16), for comparing per-shard cost.
# Used for the profile section of docs/benchmarks.md. Not part of make test.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-27701}
SECS=${SECS:-15}
OUT=${OUT:-bench-out/profile}
RUNS=${RUNS:-put100 get100 put1 get1}
BIN=${BIN:-$PWD/bin/concord}
SHARDS=${SHARDS:-}
SHARDFLAG=()
[ -z "$SHARDS" ] || SHARDFLAG=(--shards "$SHARDS")
[ -x "$BIN" ] || { echo "profile: $BIN missing: run make build first" >&2; exit 1; }
mkdir -p "$OUT"
DATA=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true # reap them, quietly
	rm -rf "$DATA"
}
trap cleanup EXIT

PEERS=127.0.0.1:$BASE,127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))
for i in 0 1 2; do
	"$BIN" server --addr 127.0.0.1:$((BASE + i)) --data-dir "$DATA/n$i" --peers "$PEERS" \
		--pprof-addr 127.0.0.1:$((BASE + 10 + i)) --http-addr 127.0.0.1:$((BASE + 20 + i)) --log-level warn "${SHARDFLAG[@]}" >"$OUT/server-n$((i + 1)).log" 2>&1 &
	PIDS+=($!)
done
# Wait until every shard takes writes (the preload of the first run would
# otherwise profile the elections).
ready=
for _ in $(seq 60); do
	if "$BIN" bench --endpoints "$PEERS" --workload put --clients 16 --ops 500 -o json >/dev/null 2>&1; then
		ready=1
		break
	fi
	sleep 1
done
[ -n "$ready" ] || { echo "profile: the cluster took no writes within 60 s; see $OUT/server-n*.log" >&2; exit 1; }

# frames: every node's raft frame and message counters, one line per node.
frames() {
	for i in 0 1 2; do
		curl -s "http://127.0.0.1:$((BASE + 20 + i))/metrics" |
			awk -v n=$((i + 1)) '/^concord_raft_(frames|messages)_total/ { v[$1] = $2 }
				END { printf "n%d %d %d %d %d\n", n, v["concord_raft_frames_total{direction=\"sent\"}"], v["concord_raft_messages_total{direction=\"sent\"}"],
					v["concord_raft_frames_total{direction=\"received\"}"], v["concord_raft_messages_total{direction=\"received\"}"] }'
	done
}

# frameRates BEFORE AFTER SECS: per node, frames and messages per second.
frameRates() {
	paste -d' ' <(echo "$1") <(echo "$2") | awk -v s="$3" '{ printf "%s sent %.0f frames/s %.0f msgs/s (%.1f per frame); received %.0f frames/s %.0f msgs/s (%.1f per frame)\n",
		$1, ($7-$2)/s, ($8-$3)/s, ($7-$2) ? ($8-$3)/($7-$2) : 0, ($9-$4)/s, ($10-$5)/s, ($9-$4) ? ($10-$5)/($9-$4) : 0 }'
}

# cacheCounts: every node's block cache hits and misses, one line per node.
cacheCounts() {
	for i in 0 1 2; do
		curl -s "http://127.0.0.1:$((BASE + 20 + i))/metrics" |
			awk -v n=$((i + 1)) '/^concord_storage_block_cache_(hits|misses)_total/ { v[$1] = $2 }
				END { printf "n%d %.0f %.0f\n", n, v["concord_storage_block_cache_hits_total"], v["concord_storage_block_cache_misses_total"] }'
	done
}

# cacheRates BEFORE AFTER SECS: per node, block cache hits and misses per second.
cacheRates() {
	paste -d' ' <(echo "$1") <(echo "$2") | awk -v s="$3" '{ printf "%s block cache %.0f hits/s %.0f misses/s\n", $1, ($5-$2)/s, ($6-$3)/s }'
}

# turnCounts: every node's storage commits (loop turns), Ready cycles and
# committed records, one line per node.
turnCounts() {
	for i in 0 1 2; do
		curl -s "http://127.0.0.1:$((BASE + 20 + i))/metrics" |
			awk -v n=$((i + 1)) '/^concord_storage_commit_duration_seconds_count/ { c += $2 }
				/^concord_raft_readies_total/ { r = $2 } /^concord_storage_records_total/ { k = $2 }
				END { printf "n%d %.0f %.0f %.0f\n", n, c, r, k }'
	done
}

# turnRates BEFORE AFTER SECS: per node, turns, Readies and records per second.
turnRates() {
	paste -d' ' <(echo "$1") <(echo "$2") | awk -v s="$3" '{ printf "%s %.0f turns/s %.0f readies/s %.0f records/s (%.1f readies, %.1f records per turn)\n",
		$1, ($6-$2)/s, ($7-$3)/s, ($8-$4)/s, ($6-$2) ? ($7-$3)/($6-$2) : 0, ($6-$2) ? ($8-$4)/($6-$2) : 0 }'
}

# run NAME BENCH-ARGS...: one bench run of $SECS+4 s with the profiles taken
# over its middle $SECS s.
run() {
	local name=$1
	shift
	"$BIN" bench --endpoints "$PEERS" --duration $((SECS + 4))s -o json "$@" >"$OUT/$name.json" &
	local bench=$!
	local waits=()
	sleep 2
	local before cbefore tbefore
	before=$(frames)
	cbefore=$(cacheCounts)
	tbefore=$(turnCounts)
	for i in 0 1 2; do
		curl -s "http://127.0.0.1:$((BASE + 10 + i))/debug/pprof/profile?seconds=$SECS" \
			-o "$OUT/$name-cpu-n$((i + 1)).out" &
		waits+=($!)
	done
	curl -s "http://127.0.0.1:$((BASE + 10))/debug/pprof/allocs?seconds=$SECS" -o "$OUT/$name-allocs-n1.out" &
	waits+=($!)
	wait "${waits[@]}" # not a bare wait: the servers are children too
	frameRates "$before" "$(frames)" "$SECS" >"$OUT/$name-frames.txt"
	cacheRates "$cbefore" "$(cacheCounts)" "$SECS" >"$OUT/$name-cache.txt"
	turnRates "$tbefore" "$(turnCounts)" "$SECS" >"$OUT/$name-turns.txt"
	cat "$OUT/$name-frames.txt" "$OUT/$name-cache.txt" "$OUT/$name-turns.txt"
	wait "$bench" || { echo "profile: concord bench failed in run $name (see $OUT/$name.json)" >&2; exit 1; }
	echo "$name: $(grep -o '"throughput_ops_per_sec": *[0-9]*' "$OUT/$name.json" | head -n 1)"
}

for r in $RUNS; do
	case $r in
	put100) run put100 --workload put --clients 100 --conns 10 ;;
	get100) run get100 --workload get --clients 100 --conns 10 ;;
	put1) run put1 --workload put --clients 1 ;;
	get1) run get1 --workload get --clients 1 --preload=false ;;
	# get100 profiles its own preload (10,000 puts, longer than 2 s on a busy
	# box) as much as its gets: after it, get100warm profiles gets alone.
	get100warm) run get100warm --workload get --clients 100 --conns 10 --preload=false ;;
	# The client's framed TCP wire (the default) and its gRPC stream, by name (issue 14).
	put100tcp) run put100tcp --workload put --clients 100 --conns 10 --wire tcp ;;
	get100warmtcp) run get100warmtcp --workload get --clients 100 --conns 10 --preload=false --wire tcp ;;
	put100grpc) run put100grpc --workload put --clients 100 --conns 10 --wire grpc ;;
	get100warmgrpc) run get100warmgrpc --workload get --clients 100 --conns 10 --preload=false --wire grpc ;;
	# YCSB A and C as bench-compare runs them; ycsbc100 after ycsba100
	# profiles reads that follow writes (the memtable full of updates).
	ycsba100) run ycsba100 --workload a --clients 100 --conns 10 ;;
	ycsbc100) run ycsbc100 --workload c --clients 100 --conns 10 --preload=false ;;
	*) echo "profile: unknown run $r (want put100 get100 get100warm put1 get1 put100tcp get100warmtcp put100grpc get100warmgrpc ycsba100 ycsbc100)" >&2 && exit 1 ;;
	esac
done
