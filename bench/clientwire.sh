#!/usr/bin/env bash
# Client wire A/B (issue 14): concord bench get and put at 100 clients with
# --wire grpc and --wire tcp, alternating, against one 3-node cluster, with
# the servers' CPU per op (utime+stime of the three server processes, from
# /proc/PID/stat, as bench/compare computes it).
# Usage: bench/clientwire.sh [rounds] [seconds]   (after make build)
set -euo pipefail
rounds=${1:-2}
secs=${2:-8}
port=${PORT:-17451}
dir=$(mktemp -d /tmp/clientwire.XXXXXX)
bin=${BIN:-bin/concord}
eps=127.0.0.1:$port,127.0.0.1:$((port + 1)),127.0.0.1:$((port + 2))
$bin cluster up --nodes 3 --base-port "$port" --http-base-port 0 --redis-base-port 0 --data-dir "$dir" >"$dir/cluster.log" 2>&1 &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  pids=$(pgrep -f -- "server.*$dir" | tr '\n' ' ' || true)
  [ "$(echo $pids | wc -w)" -ge 3 ] && $bin bench --endpoints "$eps" --workload get --clients 1 --ops 1 --preload=false >/dev/null 2>&1 && break
  sleep 0.3
done
echo "servers: $pids"
# syscalls: the servers' read and write syscalls (/proc/PID/io syscr + syscw).
syscalls() { local t=0; for p in $pids; do t=$((t + $(awk '/^sysc[rw]:/ { s += $2 } END { print s }' "/proc/$p/io"))); done; echo $t; }
ticks() { local t=0; for p in $pids; do read -r -a f <"/proc/$p/stat"; t=$((t + f[13] + f[14])); done; echo $t; }
hz=$(getconf CLK_TCK)
$bin bench --endpoints "$eps" --workload get --clients 100 --conns 10 --duration 2s >/dev/null # preload + warm up
printf '%-5s %-4s %-5s %10s %8s %8s %8s %12s %12s\n' round load wire ops/s p50ms p99ms errors cpu_us/op syscalls/op
for r in $(seq "$rounds"); do
  for load in get put; do
    for wire in grpc tcp; do
      t0=$(ticks)
      s0=$(syscalls)
      out=$($bin bench --endpoints "$eps" --workload $load --clients 100 --conns 10 --duration "${secs}s" --preload=false --wire $wire -o json)
      t1=$(ticks)
      s1=$(syscalls)
      python3 -c '
import json,sys
r=json.loads(sys.argv[1]); ticks=int(sys.argv[2]); hz=int(sys.argv[3])
us=ticks*1e6/hz/max(r["ops"],1)
print("%-5s %-4s %-5s %10.0f %8.2f %8.2f %8d %12.1f %12.2f"%(sys.argv[4],sys.argv[5],sys.argv[6],r["throughput_ops_per_sec"],r["latency_ms"]["p50"],r["latency_ms"]["p99"],r["errors"],us,int(sys.argv[7])/max(r["ops"],1)))
' "$out" $((t1 - t0)) "$hz" "$r" $load $wire $((s1 - s0))
    done
  done
done
