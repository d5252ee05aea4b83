# Two commands for a newcomer: `make run` and `make test` (see README.md).
GO ?= go
FUZZTIME ?= 30s

.PHONY: run test build bench fuzz soak
SOAKTIME ?= 60s

## run: start the broker on :6632 (a throwaway PostgreSQL when none is configured)
run:
	$(GO) build -o bin/queen ./cmd/queen
	exec ./bin/queen dev

## test: every test against real, throwaway PostgreSQL servers
test:
	bash scripts/test.sh

## build: the broker and bench binaries into bin/
build:
	$(GO) build -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench

## soak: producers and fan-out consumers for SOAKTIME, verified end to end
soak:
	bash scripts/soak.sh $(SOAKTIME)

## bench: the baseline scenarios (see scripts/bench.sh)
bench:
	bash scripts/bench.sh

## fuzz: each fuzz target for FUZZTIME (CI runs it briefly)
FUZZ = $(GO) test -run='^$$' -fuzzminimizetime=100x -fuzztime=$(FUZZTIME)
fuzz:
	$(FUZZ) -fuzz='^FuzzParseBody$$' ./ingest/
	$(FUZZ) -fuzz='^FuzzDecodeRecord$$' ./ingest/
	$(FUZZ) -fuzz='^FuzzDecodeRecord$$' ./wal/
	$(FUZZ) -fuzz='^FuzzScanSegment$$' ./wal/
	$(FUZZ) -fuzz='^FuzzOpenSegment$$' ./wal/
	$(FUZZ) -fuzz='^FuzzVerify$$' ./auth/
	$(FUZZ) -fuzz='^FuzzDecrypt$$' ./crypt/
