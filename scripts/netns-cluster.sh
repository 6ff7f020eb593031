#!/usr/bin/env bash
# make test-netns: the multi-machine steps of docs/operations.md, run for
# real on one box. Each node gets its own network namespace with its own
# address on a bridge this script creates (10.213.0.0/24), with 2 ms ± 1 ms
# of netem delay on its link when the kernel has netem; the guide's commands
# form a cluster (with TLS when the binary has `concord certs`), and a short
# `concord bench` runs against it from a fourth namespace. Every namespace,
# link and process it made is removed on exit, also on failure or Ctrl-C.
#
# Needs root (namespaces, links); without it, it says so and exits 0.
set -euo pipefail

BIN=${BIN:-$(pwd)/bin/concord}
NODES=${NODES:-3}
NET=10.213.0
BR=ccbr0
PFX=ccn        # namespace names: ccn1..ccnN, ccn0 for the client
WORK=$(mktemp -d /tmp/concord-netns.XXXXXX)
PIDS=()

if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
	echo "test-netns: skipped: needs root and ip netns (network namespaces); run it as root"
	exit 0
fi
if ip link show "$BR" >/dev/null 2>&1; then
	echo "test-netns: $BR exists already (another run, or a leftover): remove it with 'ip link del $BR'" >&2
	exit 1
fi

cleanup() {
	set +e
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null
	done
	for i in $(seq 0 "$NODES"); do ip netns del "$PFX$i" 2>/dev/null; done
	ip link del "$BR" 2>/dev/null
	rm -rf "$WORK"
	echo "test-netns: removed the namespaces, the bridge and $WORK"
}
trap cleanup EXIT INT TERM

ip link add "$BR" type bridge
ip link set "$BR" up
netem=yes
for i in $(seq 0 "$NODES"); do
	ns=$PFX$i
	ip netns add "$ns"
	ip link add "ccv$i" type veth peer name eth0 netns "$ns"
	ip link set "ccv$i" master "$BR" up
	ip netns exec "$ns" ip addr add "$NET.$((i + 1))/24" dev eth0
	ip netns exec "$ns" ip link set eth0 up
	ip netns exec "$ns" ip link set lo up
	if [ $netem = yes ] && ! ip netns exec "$ns" tc qdisc add dev eth0 root netem delay 2ms 1ms 2>/dev/null; then
		netem=no
		echo "test-netns: this kernel has no netem (tc: unknown qdisc); running without the 2 ms ± 1 ms delay"
	fi
done
[ $netem = yes ] && echo "test-netns: 2 ms ± 1 ms netem delay on every node's link"

addr() { echo "$NET.$(($1 + 1)):7001"; }
peers=$(for i in $(seq 1 "$NODES"); do printf '%s,' "$(addr "$i")"; done)
peers=${peers%,}

tls=()
if "$BIN" certs --help >/dev/null 2>&1; then
	hosts=$(for i in $(seq 0 "$NODES"); do printf '%s,' "$NET.$((i + 1))"; done)
	"$BIN" certs --dir "$WORK/certs" --hosts "${hosts%,}" >/dev/null
	echo "test-netns: TLS on (certificates from concord certs in $WORK/certs)"
fi
tls_flags() { # node index (0: the client)
	[ -d "$WORK/certs" ] || return 0
	local name=node # every node shares the node certificate (valid for every address)
	[ "$1" = 0 ] && name=client # the client presents the client certificate
	echo "--tls-ca $WORK/certs/ca.crt --tls-cert $WORK/certs/$name.crt --tls-key $WORK/certs/$name.key"
}

# The guide's command, once per machine (docs/operations.md, "Running across machines").
for i in $(seq 1 "$NODES"); do
	ip=$NET.$((i + 1))
	# shellcheck disable=SC2046
	ip netns exec "$PFX$i" "$BIN" server --addr "$ip:7001" --data-dir "$WORK/node$i" --peers "$peers" \
		--http-addr "$ip:8001" $(tls_flags "$i") >"$WORK/node$i.log" 2>&1 &
	PIDS+=($!)
done
echo "test-netns: started $NODES nodes: $peers"

scheme=http
curl_tls=()
if [ -d "$WORK/certs" ]; then
	scheme=https
	curl_tls=(--cacert "$WORK/certs/ca.crt")
fi
for i in $(seq 1 "$NODES"); do
	url="$scheme://$NET.$((i + 1)):8001/readyz"
	for t in $(seq 600); do
		if ip netns exec "${PFX}0" curl -sf "${curl_tls[@]}" "$url" >/dev/null 2>&1; then break; fi
		if [ "$t" = 600 ]; then
			echo "test-netns: node $i not ready after 60 s; its log:" >&2
			tail -n 30 "$WORK/node$i.log" >&2
			exit 1
		fi
		sleep 0.1
	done
done
echo "test-netns: every node answers /readyz from another namespace"

# shellcheck disable=SC2046
ip netns exec "${PFX}0" "$BIN" bench --endpoints "$peers" $(tls_flags 0) --duration 10s --clients 32 --conns 4 \
	--workload put --keys 10000 | tee "$WORK/bench.txt"
# shellcheck disable=SC2046
ip netns exec "${PFX}0" "$BIN" status --endpoints "$peers" $(tls_flags 0) | head -n 5
echo "test-netns: PASS"
