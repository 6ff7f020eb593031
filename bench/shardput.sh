#!/usr/bin/env bash
# bench/shardput.sh SHARDS WORKLOAD CLIENTS PORT: a fresh `concord cluster up
# --nodes 3 --shards SHARDS` on ports PORT.. (no HTTP or Redis ports), a
# 16-client warm-up, then `concord bench --workload WORKLOAD --clients
# CLIENTS --conns min(CLIENTS, 10) --keys 10000 --value-size 256 --duration 8s`; prints
# ops/s, p50 and the three servers' CPU per op (/proc/PID/stat utime+stime
# around the run). BIN picks the binary (default bin/concord); CONCORD_*
# variables reach the servers (e.g. CONCORD_RAFT_LOG_KEEP_ENTRIES=1000).
# METRICS=1 also serves /metrics on ports PORT+50.. and prints, summed over
# the three nodes and per op of the measured run, the records committed and
# the bytes Pebble flushed and compacted (and the flushes), and the raft
# entries each shard applied per second, and the snapshot bytes sent. DUR sets the duration (default 8s).
# Used in docs/benchmarks.md ("Per-shard cost of a loop turn", "Where we
# stand against the targets (issue 14, 2026-11-27)", "Leader-aware log
# truncation"). Not part of make test.
set -u
S=$1 W=$2 C=$3 P=$4
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin/concord}
M=${METRICS:-0}
DS=${DUR:-8s}
DS=${DS%s} # seconds, for the per-second figures
HP=0
[ "$M" = 1 ] && HP=$((P + 50))
D=$(mktemp -d)
"$BIN" cluster up --nodes 3 --shards "$S" --base-port "$P" --http-base-port "$HP" --redis-base-port 0 --data-dir "$D" >"$D/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$D"' EXIT
EP=127.0.0.1:$P,127.0.0.1:$((P + 1)),127.0.0.1:$((P + 2))
for _ in $(seq 60); do
	"$BIN" bench --endpoints "$EP" --workload put --clients 16 --ops 300 -o json >/dev/null 2>&1 && break
	sleep 1
done
pids=$(pgrep -f "data-dir $D/" | tr '\n' ' ')
cpu() { local t=0 a p; for p in $pids; do a=($(cut -d' ' -f14,15 /proc/$p/stat)); t=$((t + a[0] + a[1])); done; echo $t; }
# scrape: the sum over the nodes of each counter below, space-separated.
scrape() {
	for i in 0 1 2; do curl -s "http://127.0.0.1:$((HP + i))/metrics"; done | python3 -c '
import sys
names = ["concord_storage_records_total", "concord_storage_flushed_bytes_total", "concord_storage_compacted_bytes_total", "concord_storage_flushes_total"]
tot = dict.fromkeys(names, 0.0)
applied = snap = 0.0
for line in sys.stdin:
    f = line.split()
    if len(f) == 2 and f[0] in tot:
        tot[f[0]] += float(f[1])
    elif len(f) == 2 and f[0].startswith("concord_shard_applied_index{"):
        applied += float(f[1])
    elif len(f) == 2 and f[0].startswith("concord_snapshot_bytes_total{") and "sent" in f[0]:
        snap += float(f[1])
print(" ".join(str(int(tot[n])) for n in names), int(applied), int(snap))'
}
[ "$M" = 1 ] && m0=$(scrape)
c0=$(cpu)
out=$("$BIN" bench --endpoints "$EP" --workload "$W" --clients "$C" --conns "$((C < 10 ? C : 10))" --keys 10000 --value-size 256 --duration "${DUR:-8s}" -o json 2>/dev/null)
c1=$(cpu)
[ "$M" = 1 ] && m1=$(scrape)
read -r ops rate p50 < <(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["ops"], round(d["throughput_ops_per_sec"]), d["latency_ms"]["p50"])')
hz=$(getconf CLK_TCK)
line="shards=$S $W c$C ops/s=$rate p50=$p50 server_us_per_op=$(python3 -c "print(round(($c1 - $c0) * 1e6 / $hz / $ops, 1))")"
if [ "$M" = 1 ]; then
	line="$line $(python3 -c "
a, b, ops = [int(x) for x in '$m0'.split()], [int(x) for x in '$m1'.split()], $ops
d = [y - x for x, y in zip(a, b)]
print(f'records_per_op={d[0] / ops:.2f} flushed_B_per_op={d[1] / ops:.0f} compacted_B_per_op={d[2] / ops:.0f} flushes={d[3]} entries_per_s_per_shard={d[4] / 3 / $S / $DS:.0f} snapshot_bytes_sent={d[5]}')")"
fi
echo "$line"
