# Two commands for a newcomer: `make run` and `make test` (see README.md).
GO ?= go

.PHONY: run test build bench bench-smoke bench-wrk fuzz soak docs
SOAKTIME ?= 60s
# Version and commit stamped into `queen version` (Go's own vcs stamp is
# missing in git worktrees and with -buildvcs=false).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS = -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BENCHTIME ?= 10s
BENCHREPEAT ?= 3

## run: start the broker on :6632 (a throwaway PostgreSQL when none is configured)
run:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/queen ./cmd/queen
	exec ./bin/queen dev

## test: every test against real, throwaway PostgreSQL servers
test:
	bash scripts/test.sh

## build: the broker and bench binaries into bin/
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/queen ./cmd/queen
	$(GO) build -o bin/queen-bench ./cmd/queen-bench

## docs: regenerate docs/configuration.md from the table in internal/config
docs:
	$(GO) generate ./cmd/queen

## soak: producers and fan-out consumers for SOAKTIME, verified end to end
soak:
	bash scripts/soak.sh $(SOAKTIME)

## bench: every scenario for BENCHTIME each (fresh broker and durable PostgreSQL
## per scenario), the table's rows BENCHREPEAT times in all; writes
## BENCHMARKS.md and docs/bench/ (see scripts/bench.sh). BENCHSCENARIOS picks
## scenarios (default all), BENCHNOTE adds a warning line.
bench:
	BENCHTIME=$(BENCHTIME) BENCHREPEAT=$(BENCHREPEAT) bash scripts/bench.sh

## bench-smoke: the reduced scenario set for ~1 s each, report and plots into a
## temporary directory; fails when a scenario fails to run or verify (CI runs it)
bench-smoke:
	bash scripts/bench.sh --smoke

## bench-wrk: push rows with wrk as the load generator instead of queen-bench's
## producers, WRKTIME each (scripts/wrk-push.sh; docs/benchmarking.md, "An
## independent load generator: wrk"). WRKROWS: "CONNECTIONS ITEMS PARTITIONS"
## triples, comma-separated (default the five push rows); CI runs one briefly.
WRKTIME ?= 10s
WRKROWS ?= 8 100 10,50 100 1001,50 10 1001,64 1 10,16 100 10000
bench-wrk: build
	@rows='$(WRKROWS)'; IFS=,; for row in $$rows; do IFS=' '; bash scripts/wrk-push.sh $$row $(WRKTIME) || exit 1; IFS=,; done

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
	$(FUZZ) -fuzz='^FuzzAckParseCache$$' ./fastapi/
	$(FUZZ) -fuzz='^FuzzSegmentDecode$$' ./pg/
	$(FUZZ) -fuzz='^FuzzLoneSurrogate$$' ./ingest/
