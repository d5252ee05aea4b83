#!/usr/bin/env bash
# Measures what a dedup sidecar layout costs PostgreSQL per client key:
# backend CPU of the probe and of the insert, per batch of random 64-bit
# key hashes, and bytes per key once KEYS keys are stored. The figures in
# docs/decisions.md ("Sidecar layout: what else was measured") come from it.
#
#   scripts/dedup-layouts.sh KEYS BATCH [BATCHES] [ROUNDS]
#   defaults:                2000000 340 200      2
#
# Connects with psql's usual PG* variables (PGHOST, PGPORT, PGUSER,
# PGDATABASE) to a throwaway server ON THIS HOST (the backend's CPU is read
# from /proc/PID/stat) and works in schema dedup_layouts, which it drops
# first and at the end. Layouts, each filled with KEYS keys by inserts of
# BATCH keys (grown as in service, so index fill is realistic; 20 M keys
# take about 15 minutes on two loaded cores), then timed over BATCHES
# batches, ROUNDS times alternately:
#   gin    today's queen.dedup_batches: one row per batch, the keys in one
#          bigint[] under a GIN index (fastupdate off); probe (&&) + insert
#   uniq   one row (key_hash, batch_id) per key, a UNIQUE btree on key_hash
#          (the insert is the probe: a key already there aborts the batch)
#          and a btree on batch_id (the sweep)
#   hash   one row (key_hash, batch_id) per key, a hash index on key_hash
#          (probe = ANY, then insert) and a btree on batch_id
# Output: one line per layout and round, µs of backend CPU per key (10 ms
# clock ticks: keep BATCHES * BATCH * µs/key well above 10 ms), then bytes
# per key of each table (heap with TOAST and free-space maps) and index.
set -euo pipefail
keys=${1:-2000000}; batch=${2:-340}; batches=${3:-200}; rounds=${4:-2}
fills=$(( (keys + batch - 1) / batch ))
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }

q <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS dedup_layouts CASCADE;
CREATE SCHEMA dedup_layouts;
SET search_path = dedup_layouts;
CREATE TABLE gin (expires_at timestamptz NOT NULL, partition_ids uuid[] NOT NULL,
    base_offsets bigint[] NOT NULL, key_hashes bigint[] NOT NULL);
CREATE INDEX gin_keys ON gin USING gin (key_hashes) WITH (fastupdate = off);
CREATE INDEX gin_expires_at ON gin (expires_at);
CREATE TABLE uniq (key_hash bigint NOT NULL, batch_id bigint NOT NULL);
CREATE UNIQUE INDEX uniq_key ON uniq (key_hash);
CREATE INDEX uniq_batch ON uniq (batch_id);
CREATE TABLE hash (key_hash bigint NOT NULL, batch_id bigint NOT NULL);
CREATE INDEX hash_key ON hash USING hash (key_hash);
CREATE INDEX hash_batch ON hash (batch_id);
CREATE SEQUENCE batch_ids;
CREATE FUNCTION random_keys(n int) RETURNS bigint[] LANGUAGE sql VOLATILE AS
    \$\$ SELECT array_agg(((random() - 0.5) * 1.8e19)::bigint) FROM generate_series(1, n) \$\$;
-- run: nb batches of sz keys of one operation, a commit every 50.
CREATE PROCEDURE run(op text, nb int, sz int) LANGUAGE plpgsql AS \$\$
DECLARE k bigint[]; b bigint;
    pids uuid[] := array(SELECT gen_random_uuid() FROM generate_series(1, 10));
    offs bigint[] := array(SELECT g::bigint FROM generate_series(1, 10) g);
BEGIN
    FOR i IN 1..nb LOOP
        k := random_keys(sz); b := nextval('batch_ids');
        CASE op
        WHEN 'none' THEN NULL;
        WHEN 'gin-probe' THEN PERFORM 1 FROM gin d WHERE d.key_hashes && k LIMIT 1;
        WHEN 'gin-insert' THEN INSERT INTO gin VALUES (now() + interval '1 hour', pids, offs, k);
        WHEN 'uniq-insert' THEN INSERT INTO uniq SELECT h, b FROM unnest(k) h;
        WHEN 'hash-probe' THEN PERFORM 1 FROM hash d WHERE d.key_hash = ANY(k) LIMIT 1;
        WHEN 'hash-insert' THEN INSERT INTO hash SELECT h, b FROM unnest(k) h;
        END CASE;
        IF i % 50 = 0 THEN COMMIT; END IF;
    END LOOP;
END \$\$;
SQL

# cpu OP NB: backend CPU µs per key of NB batches of OP (key generation
# included: subtract the 'none' line).
cpu() {
  q <<SQL
SET search_path = dedup_layouts;
SET enable_seqscan = off;
SET jit = off;
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat > /tmp/dedup-layouts.\$BPID
CALL run('$1', $2, $batch);
\! awk -v op=$1 -v n=$(( $2 * batch )) 'NR == FNR { a = \$1; next } { printf "%-12s %8.2f us/key\n", op, (\$14 + \$15 - a) * 1e6 / 100 / n }' /tmp/dedup-layouts.\$BPID /proc/\$BPID/stat; rm -f /tmp/dedup-layouts.\$BPID
SQL
}

echo "filling each layout with $((fills * batch)) keys in batches of $batch"
for op in gin-insert uniq-insert hash-insert; do cpu "$op" "$fills" >/dev/null; done
q -c "VACUUM ANALYZE dedup_layouts.gin, dedup_layouts.uniq, dedup_layouts.hash"
echo "keys=$((fills * batch)) batch=$batch batches=$batches (backend CPU per key)"
for _ in $(seq "$rounds"); do
  for op in none gin-probe gin-insert uniq-insert hash-probe hash-insert; do cpu "$op" "$batches"; done
done
echo "bytes per key:"
q <<SQL
SELECT rpad(c.relname, 16) || round(((CASE c.relkind WHEN 'r' THEN pg_table_size(c.oid) ELSE pg_relation_size(c.oid) END)::float8
    / (SELECT count(*) FROM dedup_layouts.uniq))::numeric, 1)
FROM pg_class c WHERE c.relnamespace = 'dedup_layouts'::regnamespace AND c.relkind IN ('r', 'i')
ORDER BY c.relname;
SQL
q -c "SET client_min_messages = warning" -c "DROP SCHEMA dedup_layouts CASCADE"
