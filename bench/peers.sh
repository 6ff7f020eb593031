#!/usr/bin/env bash
# Installs the peer systems `make bench-compare` measures, when missing:
#   etcd 3.6.16 (server) and etcd's `benchmark` tool (v3.6.8, the newest
#   3.6 root module the proxy serves), built from the Go module proxy in
#   throw-away wrapper modules (a plain `go install` fails on their replace
#   directives); redis-server and redis-benchmark from apt.
# Binaries land in $PEERS_BIN (default .cache/peers/bin, gitignored).
# `bench/peers.sh redis` sees to the Redis ones only (make bench-redis).
# See ../shared/research/peers-bench.md for where these commands come from.
set -euo pipefail
cd "$(dirname "$0")/.."
ETCD_VERSION=v3.6.16
ETCD_BENCH_VERSION=v3.6.8
PEERS_BIN=${PEERS_BIN:-$PWD/.cache/peers/bin}
BUILD=$PWD/.cache/peers/build
ONLY=${1:-}
case "$ONLY" in
"" | redis) ;;
*) echo "usage: $0 [redis]" >&2; exit 2 ;;
esac
mkdir -p "$PEERS_BIN" "$BUILD"

# wrapper DIR MODULE@VERSION PKG OUT: build PKG from MODULE@VERSION in a
# throw-away module at DIR into OUT.
wrapper() {
	local dir=$1 modver=$2 pkg=$3 out=$4
	mkdir -p "$dir"
	(
		cd "$dir"
		[ -f go.mod ] || go mod init peers/build >/dev/null 2>&1
		go get "$modver" >/dev/null
		go build -trimpath -o "$out" "$pkg"
	)
}

if [ -z "$ONLY" ] && [ ! -x "$PEERS_BIN/etcd" ]; then
	echo "peers: building etcd $ETCD_VERSION (about 2 minutes)..."
	wrapper "$BUILD/etcd" go.etcd.io/etcd/server/v3@$ETCD_VERSION go.etcd.io/etcd/server/v3 "$PEERS_BIN/etcd"
fi
if [ -z "$ONLY" ] && [ ! -x "$PEERS_BIN/benchmark" ]; then
	echo "peers: building etcd's benchmark tool $ETCD_BENCH_VERSION..."
	wrapper "$BUILD/etcdbench" go.etcd.io/etcd/v3@$ETCD_BENCH_VERSION go.etcd.io/etcd/v3/tools/benchmark "$PEERS_BIN/benchmark"
fi
# sys_which finds the system's own binary: PATH without PEERS_BIN, where the
# links made below would otherwise be found and pointed at themselves.
SYS_PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$PEERS_BIN" | paste -sd: -)
sys_which() { (PATH=$SYS_PATH && command -v "$1"); }
if ! sys_which redis-server >/dev/null || ! sys_which redis-benchmark >/dev/null; then
	echo "peers: installing redis-server and redis-tools with apt..."
	SUDO=
	[ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
fi
for b in redis-server redis-benchmark; do
	ln -sf "$(sys_which $b)" "$PEERS_BIN/$b"
done
[ -n "$ONLY" ] || "$PEERS_BIN/etcd" --version | head -1
"$PEERS_BIN/redis-server" --version
