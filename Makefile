# Concord. `make run` starts a local 3-node cluster; `make test` runs the test suite.
GO      ?= go
BIN     := bin/concord
NODES   ?= 3
PORT    ?= 7001
DATA    ?= ./data

.PHONY: all build run test test-unit test-e2e test-race vet fmt generate clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/concord

# A local cluster of $(NODES) real processes on 127.0.0.1:$(PORT)...; Ctrl-C stops it.
run: build
	$(BIN) cluster up --nodes $(NODES) --base-port $(PORT) --data-dir $(DATA)

# Everything CI runs: vet, unit tests with the race detector, then the
# end-to-end suite against real node processes.
test: vet test-unit test-e2e

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

test-unit:
	$(GO) test -race -count=1 -timeout 10m $$($(GO) list ./... | grep -v /tests/)

test-e2e: build
	$(GO) test -count=1 -timeout 15m ./tests/...

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# Regenerates the committed protobuf code (needs protoc; see scripts/genproto.sh).
generate:
	./scripts/genproto.sh

clean:
	rm -rf bin
