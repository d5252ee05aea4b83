#!/usr/bin/env bash
# Baseline bench: builds the broker and queen-bench, starts a fresh broker
# with a throwaway PostgreSQL for each scenario, runs it, verifies through
# PostgreSQL, stops the broker. Scenarios: producers {1,8} × batch {1,100},
# 256-byte payloads, 10 partitions.
#
#   scripts/bench.sh [duration] [extra queen-bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-10s}; shift || true
mkdir -p bin
go build -o bin/queen ./cmd/queen
go build -o bin/queen-bench ./cmd/queen-bench
port=${BENCH_PORT:-6690}
for producers in 1 8; do
  for batch in 1 100; do
    log=$(mktemp)
    PORT=$port bin/queen dev >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q 'broker started' "$log" && break; sleep 0.1; done
    url=$(grep -o 'url=[^ ]*' "$log" | head -1 | cut -d= -f2- | tr -d '"')
    echo "== producers=$producers batch=$batch payload=256 partitions=10 duration=$dur"
    bin/queen-bench -url "http://127.0.0.1:$port" -pg "$url" -producers "$producers" -batch "$batch" \
      -payload 256 -partitions 10 -duration "$dur" -broker-pid "$pid" "$@" || echo "queen-bench exit $?"
    kill -TERM "$pid"; wait "$pid" || true
    rm -f "$log"
  done
done
