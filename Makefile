.PHONY: build
build:
	go build -o bin/concord ./cmd/concord
