# Sourced by bench/redis-ab.sh, redis-setprof.sh and redis-msetprof.sh: starts a 3-node
# cluster of "$BIN" server processes under "$DIR" on ports from $B (node i:
# raft/gRPC B+i, Redis B+10+i, HTTP B+20+i, pprof B+30+i), fills PIDS, and
# at exit stops the nodes and drops their data (about 1 GB a run); the logs
# (and anything else in "$DIR") stay.
PEERS="127.0.0.1:$((B+1)),127.0.0.1:$((B+2)),127.0.0.1:$((B+3))"
PIDS=()
for i in 1 2 3; do
	"$BIN" server --addr 127.0.0.1:$((B+i)) --peers "$PEERS" --data-dir "$DIR/n$i" \
		--redis-addr 127.0.0.1:$((B+10+i)) --http-addr 127.0.0.1:$((B+20+i)) --pprof-addr 127.0.0.1:$((B+30+i)) \
		>"$DIR/n$i.log" 2>&1 &
	PIDS+=($!)
done
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"/n1 "$DIR"/n2 "$DIR"/n3' EXIT

# wait_balanced: wait (up to 120 s) until every node leads at least 5 of the
# 16 shards (placement has spread the leaders), failing if a node exited.
# ${RC:-redis-cli} asks each node's Redis INFO.
wait_balanced() {
	local ok i l p
	for _ in $(seq 1 120); do
		for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { echo "a node exited; see $DIR/n*.log" >&2; exit 1; }; done
		ok=0
		for i in 1 2 3; do
			l=$("${RC:-redis-cli}" -p $((B+10+i)) info 2>/dev/null | grep concord_shards_led | tr -dc 0-9 || true)
			[ "${l:-0}" -ge 5 ] && ok=$((ok + 1))
		done
		[ $ok = 3 ] && return 0
		sleep 1
	done
}
