#!/usr/bin/env bash
# The published bench (make bench): builds the broker and queen-bench, runs
# every scenario (queen-bench -scenario all: the table's rows and the plots'
# sweeps), each on a fresh broker and a fresh, durable PostgreSQL cluster
# started by queen-bench, and writes BENCHMARKS.md, docs/bench/*.png and
# docs/bench/results.jsonl (the raw results, one JSON object per run).
#
#   scripts/bench.sh [duration] [extra queen-bench flags...]
#   scripts/bench.sh --smoke [duration]
#
# duration is each scenario's push (or prefill) time, default $BENCHTIME or
# 10s. $BENCHSCENARIOS picks the scenarios (default all); $BENCHNOTE is a
# warning printed at the top of BENCHMARKS.md. After the pass over every
# scenario, the table's rows (set "rows"; with $BENCHSCENARIOS, those) run
# $BENCHREPEAT - 1 more times (default 3 in all), in rounds, and the report
# shows each repeated scenario's run of the median msg/s and the range over
# its runs. A scenario that fails to run or verify still lets the report be
# written; the script then exits non-zero.
#
# --smoke (make bench-smoke, CI) runs the reduced set "smoke" (default 1s
# each) end to end, report and plots included, into a temporary directory
# instead of the repository, and fails when a scenario fails to run or to
# verify, or when the report or a plot is missing; it then runs one push
# row with -profile and checks the CPU profile and the statement table.
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=false
if [ "${1:-}" = "--smoke" ]; then smoke=true; shift; fi
mkdir -p bin
go build -o bin/queen ./cmd/queen
go build -o bin/queen-bench ./cmd/queen-bench

if $smoke; then
  dur=${1:-${BENCHTIME:-1s}}
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  bin/queen-bench -scenario "${BENCHSCENARIOS:-smoke}" -duration "$dur" -broker bin/queen \
    -results "$out/results.jsonl" -markdown "$out/BENCHMARKS.md" -plots "$out/plots" \
    -made-with "make bench-smoke" -note "Smoke run: checks the bench end to end; not a measurement."
  for f in "$out/BENCHMARKS.md" "$out/plots/throughput-items.png" "$out/plots/cpu-items.png" \
           "$out/plots/throughput-partitions.png" "$out/plots/cpu-partitions.png"; do
    [ -s "$f" ] || { echo "bench-smoke: $f missing or empty" >&2; exit 1; }
  done
  if grep -q 'FAILED' "$out/BENCHMARKS.md"; then echo "bench-smoke: a row failed" >&2; exit 1; fi
  rows=$(grep -c ' OK |$' "$out/BENCHMARKS.md" || true)
  [ "$rows" -gt 0 ] || { echo "bench-smoke: no verified row in the report" >&2; exit 1; }
  # The profiling hook (-profile): one short push row, profiled.
  bin/queen-bench -scenario push-8x100-p10-minted -duration "$dur" -broker bin/queen -profile "$out/profile" >/dev/null
  for f in "$out/profile/push-8x100-p10-minted.broker.pprof" "$out/profile/push-8x100-p10-minted.pgss.txt"; do
    [ -s "$f" ] || { echo "bench-smoke: $f missing or empty" >&2; exit 1; }
  done
  grep -q 'queen.segments' "$out/profile/push-8x100-p10-minted.pgss.txt" ||
    { echo "bench-smoke: the statement table names no segment insert" >&2; exit 1; }
  go tool pprof -top "$out/profile/push-8x100-p10-minted.broker.pprof" >/dev/null ||
    { echo "bench-smoke: the broker CPU profile does not parse" >&2; exit 1; }
  echo "bench-smoke: passed ($rows scenarios verified; profile written)"
  exit 0
fi

dur=${1:-${BENCHTIME:-10s}}; shift || true
repeat=${BENCHREPEAT:-3}
case "$repeat" in ''|*[!0-9]*) echo "bench: BENCHREPEAT must be a whole number of at least 1" >&2; exit 2 ;; esac
repeat=$((10#$repeat))
[ "$repeat" -ge 1 ] || { echo "bench: BENCHREPEAT must be a whole number of at least 1" >&2; exit 2; }
mkdir -p docs/bench
# Each pass writes its results here; they are kept (and named) when the
# report could not be written from them.
tmp=$(mktemp -d)
done=false
trap 'if $done; then rm -rf "$tmp"; else echo "bench: the results so far are in $tmp" >&2; fi' EXIT
# An interrupt ends the pass that runs (queen-bench stops and exits 1) and
# skips the next; the report is written from what ran.
interrupted=false
trap 'interrupted=true' INT TERM
status=0
bin/queen-bench -scenario "${BENCHSCENARIOS:-all}" -duration "$dur" -broker bin/queen \
  -results "$tmp/1.jsonl" "$@" || status=$?
if [ "$repeat" -gt 1 ] && ! $interrupted; then
  bin/queen-bench -scenario "${BENCHSCENARIOS:-rows}" -repeat $((repeat - 1)) -duration "$dur" -broker bin/queen \
    -results "$tmp/2.jsonl" "$@" || status=$?
fi
shopt -s nullglob
files=("$tmp"/*.jsonl)
if [ "${#files[@]}" -eq 0 ] || [ ! -s "${files[0]}" ]; then
  echo "bench: no scenario ran; BENCHMARKS.md and docs/bench are left as they were" >&2
  done=true
  exit $((status > 0 ? status : 1))
fi
cat "${files[@]}" > "$tmp/all.jsonl"
mv "$tmp/all.jsonl" docs/bench/results.jsonl
bin/queen-bench -from docs/bench/results.jsonl -markdown BENCHMARKS.md -plots docs/bench \
  -made-with "make bench BENCHTIME=$dur BENCHREPEAT=$repeat" -note "${BENCHNOTE:-}"
done=true
exit "$status"
