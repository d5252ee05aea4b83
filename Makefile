# Two commands for a newcomer: `make run` and `make test` (see README.md).
GO ?= go

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

## fuzz: each fuzz target for FUZZEXECS executions (CI runs it briefly).
## Budgets are execution counts, not durations: with a duration (-fuzztime=10s)
## Go 1.26's fuzz coordinator can report a spurious "context deadline exceeded"
## at the deadline (golang/go#75804, fixed in Go 1.27); a count has no deadline.
## FuzzOpenSegment opens a real segment file per input (~300 execs/s here), so
## it gets a hundredth of the budget.
FUZZEXECS ?= 1000000
FUZZ = $(GO) test -run='^$$' -fuzzminimizetime=100x -fuzztime=$(FUZZEXECS)x
FUZZ_SLOW = $(GO) test -run='^$$' -fuzzminimizetime=100x -fuzztime=$(shell echo $$(( $(FUZZEXECS) / 100 )))x
fuzz:
	$(FUZZ) -fuzz='^FuzzParseBody$$' ./ingest/
	$(FUZZ) -fuzz='^FuzzParseBodyMatchesReference$$' ./ingest/
	$(FUZZ) -fuzz='^FuzzDecodeRecord$$' ./ingest/
	$(FUZZ) -fuzz='^FuzzDecodeRecord$$' ./wal/
	$(FUZZ) -fuzz='^FuzzScanSegment$$' ./wal/
	$(FUZZ_SLOW) -fuzz='^FuzzOpenSegment$$' ./wal/
	$(FUZZ) -fuzz='^FuzzVerify$$' ./auth/
	$(FUZZ) -fuzz='^FuzzDecrypt$$' ./crypt/
	$(FUZZ) -fuzz='^FuzzParseTimestamp$$' ./fastapi/
