# Concord. `make run` starts a local 3-node cluster; `make test` runs the test suite.
GO      ?= go
BIN     := bin/concord
NODES   ?= 3
PORT    ?= 7001
DATA    ?= ./data

DURATION ?= 30m
FAULTS   ?=

.PHONY: all build lib run test test-unit test-e2e test-no-thrash chromium test-netns bench-redis bench-kv739 test-robustness test-hardening robustness robustness-mutants fuzz bench-compare bench-seeds bench-placement vet fmt generate clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/concord

# The CS739 client library (docs/kv739.md): plain C over the Redis protocol,
# one shared object exporting only the six kv739_* functions, no
# dependencies beyond libc and pthreads.
CC ?= gcc
KV739_SRC := kv739/kv739.c kv739/conn.c
lib: lib/lib739kv.so
lib/lib739kv.so: $(KV739_SRC) kv739/conn.h include/kv739.h
	@mkdir -p lib
	$(CC) -O2 -g -Wall -Wextra -std=c11 -fPIC -fvisibility=hidden -shared -o $@ $(KV739_SRC) -lpthread
	ln -sf lib739kv.so lib/libkv739.so

# A local cluster of $(NODES) real processes on 127.0.0.1:$(PORT)...; Ctrl-C stops it.
run: build
	$(BIN) cluster up --nodes $(NODES) --base-port $(PORT) --data-dir $(DATA)

# Everything CI runs: vet, unit tests with the race detector, the end-to-end
# suite against real node processes, and the bounded robustness run
# (eight fault histories checked for linearizability, and a whole-cluster crash).
test: vet lib test-unit test-e2e test-robustness

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

test-unit:
	$(GO) test -race -count=1 -timeout 10m $$($(GO) list ./... | grep -v /tests/)

test-e2e: build chromium
	$(GO) test -count=1 -timeout 15m ./tests/e2e/... ./tests/resp/... ./tests/kv739/...

# The issue's no-thrash check at full length: after a rebalance, a balanced
# cluster under steady writes makes no move for QUIET (default 10m);
# make test-e2e runs the same test with 30 s.
QUIET ?= 10m
test-no-thrash: build
	CONCORD_QUIET_FOR=$(QUIET) $(GO) test -count=1 -timeout 30m -v -run '^TestRebalanceAcrossPlacementLeaderKill$$' ./tests/e2e/

# The multi-machine steps of docs/operations.md on one box: a network
# namespace per node on a bridge, the guide's commands, a short bench
# (scripts/netns-cluster.sh). Needs root; skips with a message otherwise.
test-netns: build
	./scripts/netns-cluster.sh

# TestDashboard drives the dashboard in Debian's chromium, installed here
# when missing (as root); if it cannot be, the test says so and skips.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ echo "installing chromium for the dashboard test (apt)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; } || \
	  echo "chromium could not be installed: TestDashboard will skip"; }

# Prints the test results and the run's summary line; the full log is in
# robustness-out/test.log (and printed in part on failure).
test-robustness: build
	@mkdir -p robustness-out
	@$(GO) test -count=1 -timeout 20m -v -run '^(TestRobustness|TestWholeClusterCrash|TestAvailableNoLostWrites)$$' ./tests/robustness \
		> robustness-out/test.log 2>&1; rc=$$?; \
	grep -E '^(--- |ok|FAIL|robustness:)|not linearizable|lost|kept in' robustness-out/test.log; \
	if [ $$rc -ne 0 ]; then tail -n 150 robustness-out/test.log; fi; exit $$rc

# Long replication checks, not part of `make test` (about 1-2 min): a
# follower catching up 200 MiB of 100 KiB-1 MiB values by log while other
# shards on the same links keep committing, with bounds on catch-up time and
# the nodes' peak RSS. Prints the figures measured.
# The full log is in robustness-out/hardening.log.
test-hardening: build
	@mkdir -p robustness-out
	@$(GO) test -count=1 -timeout 15m -v ./tests/hardening/... > robustness-out/hardening.log 2>&1; rc=$$?; \
	grep -E '^(--- |ok|FAIL)|caught up|wrote|meanwhile|peak RSS' robustness-out/hardening.log; \
	if [ $$rc -ne 0 ]; then tail -n 100 robustness-out/hardening.log; fi; exit $$rc

# The long robustness run: random seeds, one-minute histories, for DURATION
# (default 30m), alternating every fault kind (4 nodes) with the classic
# kinds (3 nodes); FAULTS=join,remove,... (or all, classic) fixes the kinds.
# It also runs TestAvailableNoLostWrites (first; also in test-robustness):
# available-mode puts of unique keys under faults for 45 s (a random seed),
# every acknowledged one read back after the heal (about 1 min more).
# Rerun a seed from its output with
# CONCORD_SEED=n CONCORD_FAULTS=kinds go test -run TestRobustnessSeed -v ./tests/robustness
# CONCORD_SEED=n go test -run TestAvailableNoLostWrites -v ./tests/robustness
robustness: build
	@mkdir -p robustness-out
	@CONCORD_FAULTS=$(FAULTS) CONCORD_ROBUSTNESS_DURATION=$(DURATION) CONCORD_ROBUSTNESS_KEEP_GOING=1 $(GO) test -count=1 -timeout 0 -v \
		-run '^(TestRobustnessLong|TestAvailableNoLostWrites)$$' ./tests/robustness > robustness-out/long.log 2>&1; rc=$$?; \
	grep -E '^(    --- |--- |ok|FAIL|robustness:)|faults injected|history:|not linearizable|lost|kept in' robustness-out/long.log; exit $$rc

# Fuzzes the two parsers at trust boundaries, FUZZTIME (default 5m) each:
# the raft port (FuzzRaftBatch in internal/transport: random and mutated
# peer batches against a real host) and the RESP command reader
# (FuzzReadCommand in internal/resp), and the sender's hand-written raft
# message encoder against both decoders (FuzzEncodeThenDecode in
# internal/multiraft), and the receive side's hand decoders of raft frames
# (FuzzDecodeBatch) and client put messages (FuzzDecodeRequest) against
# proto.Unmarshal, and the element count all of them take before decoding
# (FuzzCount in internal/pbcount); the raft wire's size reckoning
# (FuzzRoundTrip in internal/raftwire), the peer message decoder
# (FuzzDecodeMessage in internal/multiraft), the entry command decoder and
# the session record reader against proto.Unmarshal (FuzzCommandDecoder,
# FuzzSessionLastActive in internal/storepb); the backup file reader
# (FuzzScan in internal/backupfile), INCRBYFLOAT's long double reading and
# printing (FuzzLongDouble in internal/kv), the snapshot stream receiver
# (FuzzSnapshotStream in internal/transport) and the Redis front end's
# number arguments (FuzzNumberArgs in internal/redisapi). A failing input
# is kept in the package's testdata/fuzz/<target>/. make test runs only
# their seed corpora, as ordinary test cases.
FUZZTIME ?= 5m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRaftBatch$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzFrameReader$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzConnFrames$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/grpcapi/
	$(GO) test -run '^$$' -fuzz '^FuzzReadCommand$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/resp/
	$(GO) test -run '^$$' -fuzz '^FuzzReadPathsAgree$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/resp/
	$(GO) test -run '^$$' -fuzz '^FuzzCommandBuffered$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/resp/
	$(GO) test -run '^$$' -fuzz '^FuzzEncodeThenDecode$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/multiraft/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/grpcapi/
	$(GO) test -run '^$$' -fuzz '^FuzzCount$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/pbcount/
	$(GO) test -run '^$$' -fuzz '^FuzzRoundTrip$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/raftwire/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMessage$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/multiraft/
	$(GO) test -run '^$$' -fuzz '^FuzzCommandDecoder$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/storepb/
	$(GO) test -run '^$$' -fuzz '^FuzzSessionLastActive$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/storepb/
	$(GO) test -run '^$$' -fuzz '^FuzzScan$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/backupfile/
	$(GO) test -run '^$$' -fuzz '^FuzzLongDouble$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/kv/
	$(GO) test -run '^$$' -fuzz '^FuzzSnapshotStream$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/transport/
	$(GO) test -run '^$$' -fuzz '^FuzzNumberArgs$$' -fuzztime $(FUZZTIME) -parallel 1 ./internal/redisapi/

# Mutation testing: builds bin/concord-mutant with -tags mutant and hunts each
# planted bug (internal/mutant) with the robustness suite, one after another,
# for at most MUTANT_BUDGET each (about 11 minutes for all eight with the
# defaults); a mutant random faults reach only by luck is hunted by a
# targeted in-process harness test instead (scripts/mutants.sh). Prints one
# line per mutant; fails if any survived. Logs in robustness-out/mutant-<name>.log.
MUTANTS       ?= leader-read-no-readindex ack-before-fsync no-session-dedup forget-vote follower-read snapshot-drops-entry lease-ignores-expiry space-refusal-after-propose
MUTANT_BUDGET ?= 2m
robustness-mutants:
	$(GO) build -tags mutant -o bin/concord-mutant ./cmd/concord
	GO=$(GO) ./scripts/mutants.sh $(CURDIR)/bin/concord-mutant $(MUTANT_BUDGET) $(MUTANTS)

# Side-by-side: etcd (3 members), Redis (AOF everysec, always) and Concord
# (3 nodes) on 127.0.0.1, one at a time, the same workloads through
# `concord bench --target`, put/get rows cross-checked with etcd's benchmark
# and redis-benchmark. bench/peers.sh builds or installs the peers when
# missing. Prints one table; logs and per-run JSON in bench-out/compare.
# QUICK=1: 2 s runs and fewer rows, for a smoke test. ROUNDS=N: N rounds,
# the systems' order reversed in every other one, and a table of each row's
# medians (ratios: the median of the rounds' own), for a box whose speed
# drifts within minutes (docs/benchmarks.md, "Machine and noise").
bench-compare: build
	./bench/peers.sh
	$(GO) run ./bench/compare -out bench-out/compare $(if $(QUICK),-quick) $(if $(ROUNDS),-rounds $(ROUNDS))

# redis-benchmark -t set,get,incr,mset -n 200000 -c 50 -d 256, with -P 1
# and -P 16, one test per invocation, against a local 3-node cluster's
# Redis port and, in the same run, redis-server with appendfsync everysec
# and always (bench/redis.sh, bench/redisbench; bench/peers.sh redis
# installs redis-server and redis-benchmark when missing). Prints a table
# with the servers' CPU per request and the ratio to Redis everysec, also in
# bench-out/redis/table.md. REDIS_BENCH_N, _C, _D, _R, _TESTS, _SYSTEMS, _P
# override (bench/redis.sh). Several minutes.
bench-redis: build
	./bench/redis.sh

# The CS739 library's client experiments (docs/kv739.md), next to the Go
# client and redis-benchmark on the same cluster.
bench-kv739: build
	./bench/kv739.sh

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# Regenerates the committed protobuf code (needs protoc; see scripts/genproto.sh).
generate:
	./scripts/genproto.sh

clean:
	rm -rf bin

# The earlier designs' experiments (shared/seeds) rerun on Concord: RecoverKV
# figs. 2, 4, 5, GTStore fig. 3, the CS739 P1 table and the ECE419 grid, each
# against fresh local clusters on free ports (about 9 min on 2 cores).
# Per-run JSON, cluster logs, plots and seeds.md go to bench-out/seeds; the
# markdown and plots are then copied to docs/seeds.md and docs/img/seeds/.
# QUICK=1: 1 s points and fewer of them (~2 min), written to
# bench-out/seeds-quick only, docs untouched.
bench-seeds: build
	$(GO) run ./bench/seeds $(if $(QUICK),-quick -out bench-out/seeds-quick,-out bench-out/seeds -docs docs)

# Issue 11's placement measurements (docs/benchmarks.md, "Issue 11:
# placement measurements"): time to balance after a join and a `node remove`
# at 3, 5 and 7 nodes with 100,000 x 1 KiB keys, keys per node over 7 nodes,
# rebuild of a node that lost its disk (100 MiB at 5 KiB-1.5 MiB values),
# and YCSB A throughput during moves. Real processes on free ports, data in
# temporary dirs; prints a markdown report, also written to
# bench-out/placement.md (node logs in bench-out/placement-logs).
# QUICK=1: 5,000 keys, 3 nodes, moves under load only, one 10 MiB rebuild
# (about two minutes: a join takes over a minute whatever the data).
bench-placement: build
	$(GO) run ./bench/placement $(if $(QUICK),-quick -out bench-out/placement-quick.md,-out bench-out/placement.md)
