#!/usr/bin/env bash
# Regenerates the committed protobuf code. Needs protoc (Debian protobuf-compiler)
# and the pinned Go plugins, which this script installs into $(go env GOPATH)/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: apt-get install -y protobuf-compiler" >&2; exit 1; }
GOBIN=$(go env GOPATH)/bin
[ -x "$GOBIN/protoc-gen-go" ] || GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x "$GOBIN/protoc-gen-go-grpc" ] || GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
export PATH="$GOBIN:$PATH"
protoc -I . \
  --go_out=. --go_opt=module=github.com/concord-kv/concord \
  --go-grpc_out=. --go-grpc_opt=module=github.com/concord-kv/concord \
  api/concordpb/*.proto internal/storepb/*.proto
