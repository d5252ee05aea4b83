#!/usr/bin/env bash
# The project's one test command: README.md, `make test` and .ci/run all run
# this script. It makes sure PostgreSQL's binaries are installed (the tests
# start their own throwaway servers with them; nothing needs to be running),
# then checks formatting (gofmt) and vets (go vet, staticcheck) and runs every test with the race detector.
#
#   scripts/test.sh                 all packages
#   scripts/test.sh ./wal/ -run X   extra arguments go to `go test`
set -euo pipefail
cd "$(dirname "$0")/.."

have_pg() {
  [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/pg_ctl" ] && return 0
  command -v pg_ctl >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
}
echo "== PostgreSQL binaries"
if ! have_pg; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing PostgreSQL (Debian package)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "test.sh: PostgreSQL binaries not found: install PostgreSQL 15+ or set PG_BIN" >&2
    exit 1
  fi
fi
if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  echo "test.sh: running as root needs a 'postgres' user (initdb refuses root)" >&2
  exit 1
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then echo "gofmt: these files are not formatted:" >&2; echo "$unformatted" >&2; exit 1; fi
echo "== go vet"
go vet ./...
# staticcheck, pinned, from the Go module proxy (like every other module).
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
if [ $# -gt 0 ]; then
  echo "== go test $*"
  exec go test -race -count=1 -timeout 25m "$@"
fi
echo "== go test ./... (race detector; the e2e package takes several minutes)"
exec go test -race -count=1 -timeout 25m ./...
