#!/bin/bash
# Alternating single-client put latency of two concord binaries (issue 14,
# docs/benchmarks.md "A WAL that does not grow"): per round, for each binary
# in turn (the order swaps every round), a fresh 3-node `concord cluster up`,
# 3 s for the leaders to settle, one `concord bench --workload put
# --clients 1`, then the servers' mean synced commit time (from
# concord_storage_commit_duration_seconds{synced="true"} on /metrics), the
# WAL files' apparent size and the data dir's disk use. One cluster at a
# time, unlike bench/pairput.sh.
#
#   bench/altput.sh ROUNDS BIN_A BIN_B
#   env: DUR (default 10s), PBASE (first port, default 31400), TMP
set -u
R=$1; A=$2; B=$3; P=${PBASE:-31400}; D=${TMP:-/tmp}/altput.$$
synced() { # mean synced commit over the three nodes, µs
  for i in 0 1 2; do curl -s localhost:$((P+100+i))/metrics; done |
    awk '/^concord_storage_commit_duration_seconds_sum\{synced="true"\}/{s+=$2}
         /^concord_storage_commit_duration_seconds_count\{synced="true"\}/{c+=$2}
         END{if (c) printf "%.0f", s/c*1e6}'
}
run() { # bin
  rm -rf "$D"; mkdir -p "$D"
  "$1" cluster up --nodes 3 --base-port $P --http-base-port $((P+100)) --redis-base-port 0 --data-dir "$D" > "$D.log" 2>&1 &
  local c=$!
  for _ in $(seq 1 100); do curl -s localhost:$((P+100))/api/status >/dev/null 2>&1 && break; sleep 0.2; done
  sleep 3
  local load=$(cut -d' ' -f1 /proc/loadavg)
  local out=$("$1" bench --workload put --clients 1 --duration "${DUR:-10s}" \
    --endpoints 127.0.0.1:$P,127.0.0.1:$((P+1)),127.0.0.1:$((P+2)) 2>&1 | grep '^update')
  local wal=$(ls -l "$D"/*/db/*.log 2>/dev/null | awk '{s+=$5; n++} END{printf "%d files %.0f MiB", n, s/1048576}')
  echo "$(basename "$1") load=$load $out  synced-commit-mean-us=$(synced) wal=$wal du=$(du -sk "$D" | cut -f1)K"
  kill -INT $c; wait $c 2>/dev/null
  rm -rf "$D" "$D.log"
}
for r in $(seq 1 "$R"); do
  echo "round $r $(date -u +%H:%M:%S)"
  run "$A"; run "$B"
  X=$A; A=$B; B=$X
done
