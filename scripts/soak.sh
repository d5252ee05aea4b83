#!/usr/bin/env bash
# Soak: one broker with a throwaway PostgreSQL, producers and consumers of
# two fan-out groups for DURATION, then queen-bench verifies through
# PostgreSQL and through the consumers that every message was stored once
# and delivered exactly once, in order, to every group. Exits non-zero on
# any problem. CI runs it briefly (make soak SOAKTIME=10s).
#
#   scripts/soak.sh [duration]      default 60s
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-60s}
mkdir -p bin
go build -o bin/queen ./cmd/queen
go build -o bin/queen-bench ./cmd/queen-bench
port=${SOAK_PORT:-6695}
log=$(mktemp)
PORT=$port bin/queen dev >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 200); do grep -q 'broker started' "$log" && break; sleep 0.1; done
url=$(grep -o 'url=[^ ]*' "$log" | head -1 | cut -d= -f2- | tr -d '"')
bin/queen-bench -url "http://127.0.0.1:$port" -pg "$url" -duration "$dur" -producers 4 -batch 20 \
  -partitions 16 -payload 256 -consumers 2 -groups 2 -pop-batch 100 -broker-pid "$pid"
echo "soak: passed"
