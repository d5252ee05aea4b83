#!/usr/bin/env bash
# One queen-bench run on a fresh `queen dev` broker (throwaway PostgreSQL),
# printed as one line: accepted msg/s, the mean projection batch (ms and
# items, from the broker's /metrics) and the verification verdict. For
# before/after comparisons: run it alternately with two broker binaries.
#
#   scripts/bench-once.sh [BROKER_BINARY] [PORT] [PRODUCERS] [BATCH] [DURATION]
#   defaults:             bin/queen       6694   8           100     10s
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin/queen}; port=${2:-6694}; producers=${3:-8}; batch=${4:-100}; dur=${5:-10s}
[ -x bin/queen-bench ] || go build -o bin/queen-bench ./cmd/queen-bench
[ -x "$bin" ] || go build -o "$bin" ./cmd/queen
log=$(mktemp)
PORT=$port "$bin" dev >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q 'broker started' "$log" && break; sleep 0.1; done
url=$(grep -o 'url=[^ ]*' "$log" | head -1 | cut -d= -f2- | tr -d '"')
out=$(bin/queen-bench -url "http://127.0.0.1:$port" -pg "$url" -producers "$producers" -batch "$batch" \
  -payload 256 -partitions 10 -duration "$dur" 2>&1)
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
msgs=$(echo "$out" | grep 'msg/s (accepted)' | awk -F'|' '{print $3}' | tr -d ' ')
sum=$(echo "$metrics" | awk '/^queen_projector_batch_seconds_sum\{outcome="ok"\}/ {print $2}')
n=$(echo "$metrics" | awk '/^queen_projector_batch_seconds_count\{outcome="ok"\}/ {print $2}')
items=$(echo "$metrics" | awk '/^queen_projector_batch_items_sum/ {print $2}')
verdict=$(echo "$out" | grep -o '^verify: [A-Z]*' || echo "verify: ?")
awk -v m="$msgs" -v s="$sum" -v n="$n" -v i="$items" -v v="$verdict" \
  'BEGIN { printf "msg/s=%s batch_ms=%.2f items/batch=%d %s\n", m, (n>0? s*1000/n : 0), (n>0? i/n : 0), v }'
