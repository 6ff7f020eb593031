#!/bin/bash
# Paired single-client put latency of two concord binaries (issue 14,
# docs/benchmarks.md "Single-client put latency"): per round, one 3-node
# `concord cluster up` per binary, both up at once, and one
# `concord bench --workload put --clients 1` against each, run at the same
# time, so both see the same background load on a shared box; the binaries
# swap port ranges every round. Prints each run's update row (ops, ops/s,
# p50, p90, p99, p99.9, max in ms).
#
#   bench/pairput.sh WIRE ROUNDS BIN_A BIN_B     (WIRE: grpc or tcp)
#   env: DUR (default 8s), PBASE (first port, default 29000), TMP,
#        CLIENTS and CONNS (default 1: the single-client case)
set -u
W=$1; R=$2; A=$3; B=$4; P=${PBASE:-29000}; T=${TMP:-/tmp}/pairput.$$
mkdir -p "$T"
up() { # bin port
  local D=$T/data-$2; rm -rf "$D"; mkdir -p "$D"
  "$1" cluster up --nodes 3 --base-port "$2" --http-base-port $(($2+100)) --redis-base-port 0 --data-dir "$D" > "$D/cluster.log" 2>&1 &
  echo $!
}
bench() { # bin port out
  "$1" bench --workload put --clients "${CLIENTS:-1}" --conns "${CONNS:-1}" --duration "${DUR:-8s}" --wire "$W" \
    --endpoints 127.0.0.1:$2,127.0.0.1:$(($2+1)),127.0.0.1:$(($2+2)) 2>&1 | grep '^update' > "$3"
}
for r in $(seq 1 "$R"); do
  PA=$((P+r*20)); PB=$((P+r*20+10))
  ca=$(up "$A" $PA); cb=$(up "$B" $PB)
  for p in $PA $PB; do for _ in $(seq 1 100); do curl -s localhost:$((p+100))/api/status >/dev/null 2>&1 && break; sleep 0.2; done; done
  sleep 3 # leaders settle on their preferred replicas
  bench "$A" $PA "$T/a.out" & ja=$!
  bench "$B" $PB "$T/b.out" & jb=$!
  wait $ja $jb
  echo "round $r $(basename "$A") $W: $(cat "$T/a.out")"
  echo "round $r $(basename "$B") $W: $(cat "$T/b.out")  load=$(cut -d' ' -f1 /proc/loadavg)"
  kill -INT "$ca" "$cb"; wait "$ca" "$cb" 2>/dev/null
  rm -rf "$T/data-$PA" "$T/data-$PB"
  X=$A; A=$B; B=$X
done
rm -rf "$T"
