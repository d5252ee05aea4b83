#!/usr/bin/env bash
# A push row of the bench with wrk as the load generator instead of
# queen-bench's own producers: an independent check of the push rows
# (docs/benchmarking.md, "An independent load generator: wrk").
#
#   scripts/wrk-push.sh CONNECTIONS ITEMS PARTITIONS [DURATION] [BROKER]
#   e.g. scripts/wrk-push.sh 64 1 10 10s
#
# It starts a fresh broker (BROKER, default bin/queen) on a fresh durable
# PostgreSQL (`queen-bench -serve`), runs `wrk -t2 -c CONNECTIONS -d
# DURATION` with bench/wrk/push.lua (ITEMS items per push over PARTITIONS
# partitions, 256-byte payloads, ids minted by the broker), waits until the
# projector has caught up, and prints one line: items answered queued per
# second, wrk's latency percentiles, CPU per queued item of the broker, of
# PostgreSQL (postmaster and children) and of wrk itself, and the
# verification: the queue holds exactly the items answered queued or
# buffered, and at most the items of the requests in flight when wrk
# stopped besides (wrk does not read their answers); no duplicates are
# possible, every id being minted; and no answer was anything but 201 with
# item verdicts. Exit status 1 when the verification fails.
#
# Needs wrk and psql (Debian packages wrk and postgresql-client); installs
# wrk when it is missing and apt-get is there.
set -euo pipefail
cd "$(dirname "$0")/.."
conns=${1:?connections}; items=${2:?items per push}; parts=${3:?partitions}
dur=${4:-10s}; broker=${5:-bin/queen}
command -v wrk >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
psql=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | tail -1 || true)
[ -n "$psql" ] || { echo "wrk-push: psql not found" >&2; exit 2; }
[ -x bin/queen-bench ] || go build -o bin/queen-bench ./cmd/queen-bench
[ -x "$broker" ] || go build -o "$broker" ./cmd/queen

tmp=$(mktemp -d)
bin/queen-bench -serve -broker "$broker" >"$tmp/serve" 2>"$tmp/serve.err" &
serve=$!
trap 'kill -INT $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 600); do [ -s "$tmp/serve" ] && break; kill -0 $serve 2>/dev/null || break; sleep 0.1; done
[ -s "$tmp/serve" ] || { echo "wrk-push: queen-bench -serve did not start:" >&2; cat "$tmp/serve.err" >&2; exit 1; }
field() { grep -o "\"$1\":\"*[^,\"}]*" "$tmp/serve" | head -1 | sed 's/^"[^"]*":"*//'; }
url=$(field url); pgurl=$(field pg_url); bpid=$(field broker_pid); pmpid=$(field postmaster_pid)

# CPU seconds × 100 (USER_HZ) of a process, and of a PostgreSQL server:
# the postmaster with its reaped children, and every live child with its
# own reaped children (as queen-bench measures it, bench/proc.go).
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
server_ticks() {
  local t; t=$(awk '{print $14+$15+$16+$17}' "/proc/$pmpid/stat")
  for c in $(pgrep -P "$pmpid"); do
    t=$((t + $(awk '{print $14+$15+$16+$17}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

b0=$(ticks "$bpid"); p0=$(server_ticks)
ITEMS=$items PARTITIONS=$parts QUEUE=wrk \
  /usr/bin/time -f 'wrk-cpu %U %S' -o "$tmp/wrk.time" \
  wrk -t2 -c"$conns" -d"$dur" --timeout 30s --latency -s bench/wrk/push.lua "$url" >"$tmp/wrk.out" 2>&1 || true
b1=$(ticks "$bpid"); p1=$(server_ticks)

# Caught up: the projector's backlog is 0.
for _ in $(seq 600); do
  [ "$(curl -s "$url/metrics" | awk '/^queen_projector_backlog / {print $2}')" = "0" ] && break
  sleep 0.1
done
stored=$("$psql" "$pgurl" -Atc "SELECT coalesce(sum(s.last_offset - s.base_offset + 1), 0) FROM queen.segments s
  JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'wrk'")

verdicts=$(grep '^wrk-push:' "$tmp/wrk.out" || true)
[ -n "$verdicts" ] || { echo "wrk-push: no verdict line from wrk:" >&2; cat "$tmp/wrk.out" >&2; exit 1; }
val() { echo "$verdicts" | grep -o "$1=[0-9]*" | cut -d= -f2; }
queued=$(val queued); buffered=$(val buffered); dup=$(val duplicate); failed=$(val failed); bad=$(val bad_answers)
socket_errors=$(grep -c 'Socket errors' "$tmp/wrk.out" || true)
secs=$(awk '/requests in/ {sub("s,$", "", $4); print $4}' "$tmp/wrk.out")
pct() { awk -v p="$1" '$1 == p {print $2}' "$tmp/wrk.out"; }
wrkcpu=$(awk '/^wrk-cpu/ {print $2+$3}' "$tmp/wrk.time")
verify=OK
# wrk stops with a request in flight on each connection and does not read
# its answer: those items may be stored too.
if [ "$stored" -lt "$((queued + buffered))" ] || [ "$stored" -gt "$((queued + buffered + conns * items))" ] || [ "$dup" != 0 ] || [ "$failed" != 0 ] || [ "$bad" != 0 ] || [ "$socket_errors" != 0 ]; then
  verify=FAILED
fi
awk -v c="$conns" -v i="$items" -v p="$parts" -v q="$queued" -v b="$buffered" -v s="$secs" \
  -v bt=$((b1 - b0)) -v pt=$((p1 - p0)) -v w="$wrkcpu" -v p50="$(pct 50%)" -v p99="$(pct 99%)" \
  -v st="$stored" -v v="$verify" -v bad="$bad" 'BEGIN {
    n = q + b
    printf "wrk %dx%d over %d: %.1fk msg/s queued, buffered %d, p50 %s p99 %s, CPU µs/msg broker %.1f PostgreSQL %.1f wrk %.1f, stored %d, bad answers %d, verify %s\n",
      c, i, p, q / s / 1000, b, p50, p99, bt * 1e4 / n, pt * 1e4 / n, w * 1e6 / n, st, bad, v
  }'
[ "$verify" = OK ] || { cat "$tmp/wrk.out" >&2; echo "stored=$stored queued=$queued buffered=$buffered sock=$socket_errors" >&2; exit 1; }
