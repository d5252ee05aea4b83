-- Queen broker schema. Applied on every start under an advisory lock; every
-- statement is idempotent.
CREATE SCHEMA IF NOT EXISTS queen;

-- ddl_once runs ddl when missing is true. CREATE INDEX IF NOT EXISTS, ADD
-- COLUMN IF NOT EXISTS and DROP CONSTRAINT IF EXISTS take their table's
-- lock before they find nothing to do (SHARE, which holds up writes;
-- ACCESS EXCLUSIVE, which holds up reads too), until the schema
-- transaction commits: at every broker start, every other broker's
-- batches and pops would wait for it. Such statements below run through
-- this, behind a look at the catalog (measured: with a reader holding
-- queen.segments, the DROP CONSTRAINT IF EXISTS waited for it).
CREATE OR REPLACE FUNCTION queen.ddl_once(missing boolean, ddl text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF missing THEN
        EXECUTE ddl;
    END IF;
END
$$;
-- column_missing: table tbl has no column col.
CREATE OR REPLACE FUNCTION queen.column_missing(tbl regclass, col text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$ SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tbl AND attname = col AND NOT attisdropped) $$;

-- Upgrading a sidecar of an earlier version (queen.dedup_batches.layout,
-- described with the table below) comes first, before this transaction
-- holds any other table's lock: its ACCESS EXCLUSIVE lock waits for the
-- batches of brokers of the version before, which read the sidecar and
-- then write segments, partitions and checkpoints; had this transaction
-- locked one of those already, the two would deadlock (found in review,
-- with the segments lock below). Only when missing: ADD COLUMN IF NOT
-- EXISTS and CREATE INDEX IF NOT EXISTS take their locks even when there
-- is nothing to do.
-- (On a new database the table does not exist yet: both look false, and
-- the same two statements follow its CREATE TABLE below.)
SELECT queen.ddl_once(to_regclass('queen.dedup_batches') IS NOT NULL AND queen.column_missing(to_regclass('queen.dedup_batches'), 'layout'),
    'ALTER TABLE queen.dedup_batches ADD COLUMN layout smallint');
SELECT queen.ddl_once(to_regclass('queen.dedup_batches') IS NOT NULL AND to_regclass('queen.dedup_batches_unmarked') IS NULL,
    'CREATE INDEX dedup_batches_unmarked ON queen.dedup_batches (expires_at) WHERE layout IS NULL');

-- One row per queue with every /configure option (a full replace).
CREATE TABLE IF NOT EXISTS queen.queues (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                        text NOT NULL UNIQUE,
    namespace                   text NOT NULL DEFAULT '',
    task                        text NOT NULL DEFAULT '',
    lease_time                  integer NOT NULL DEFAULT 300,
    retry_limit                 integer NOT NULL DEFAULT 3,
    delayed_processing          integer NOT NULL DEFAULT 0,
    window_buffer               integer NOT NULL DEFAULT 0,
    retention_enabled           boolean NOT NULL DEFAULT false,
    retention_seconds           integer NOT NULL DEFAULT 0,
    completed_retention_seconds integer NOT NULL DEFAULT 0,
    max_wait_time_seconds       integer NOT NULL DEFAULT 0,
    encryption_enabled          boolean NOT NULL DEFAULT false,
    priority                    integer NOT NULL DEFAULT 0,
    max_size                    integer NOT NULL DEFAULT 0,
    retry_delay                 integer NOT NULL DEFAULT 1000,
    ttl                         integer NOT NULL DEFAULT 3600,
    dead_letter_queue           boolean NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean NOT NULL DEFAULT false,
    dedup_window_seconds        integer NOT NULL DEFAULT 3600,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- A partition is an ordered log; next_offset is allocated under its row lock.
CREATE TABLE IF NOT EXISTS queen.partitions (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id        uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name            text NOT NULL,
    next_offset     bigint NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_message_at timestamptz,
    UNIQUE (queue_id, name)
);

-- A projection batch moves next_offset and last_message_at of every
-- partition it touches, neither indexed, so the update can be HOT (no
-- index entries, the new version on the same page) when the page has
-- room: fillfactor 50 leaves half of every page for the new versions
-- (measured at 16 x 100 pushes over 10,000 partitions: 44% of the updates
-- HOT at the default 100, each of the others one entry in each of the
-- table's two indexes; see docs/decisions.md). Rows are about 100 bytes,
-- so the table stays small (1 MB per 10,000 partitions). Existing pages
-- keep their fill until rewritten; new and pruned ones get the room. Set
-- only when different, so a start does not touch the catalog.
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = 'queen.partitions'::regclass
                   AND 'fillfactor=50' = ANY(coalesce(reloptions, '{}'))) THEN
        ALTER TABLE queen.partitions SET (fillfactor = 50);
    END IF;
END $$;

-- The projector's partition statements, one index probe per key: names to
-- ids through the (queue_id, name) unique index, ids through the primary
-- key. The planner settings are pinned because the partitions table grows
-- from empty and a batch names up to thousands of keys: with its statistics
-- stale or small, the planner hash-joins the keys against a sequential scan
-- of every partition, or walks a queue's partitions by queue_id alone (seen:
-- 1,000 new partitions took 2 s in a queue of 56k and 0.13 s in a fresh one;
-- each of the lookup, lock and offset update read all 61k rows of a 61k
-- partition table for 1,000 keys). Probes by key are right at every size.
-- These functions and the dedup probes below are PL/pgSQL, not SQL: a SQL
-- function with SET clauses is never inlined, and PostgreSQL before 18
-- parses and plans its body on every call, while PL/pgSQL keeps the plan
-- for the session (measured: lock_partitions took 0.97 ms per call, its
-- statement 0.16 ms; the SQL wrappers cost about 1.5 ms of a batch).
-- PL/pgSQL keeps the statement, not necessarily its plan: a statement
-- with parameters is planned afresh for every call while its custom plans
-- look cheaper than the generic one, which for these array lookups they
-- always do (pg_stat_statements with track_planning: 2,001 plans for
-- 2,000 calls, 41-57 us of planning per statement per call, more than
-- executing it). plan_cache_mode = force_generic_plan plans each once per
-- session; with the planner settings above the generic plan is the same
-- index probe per key.

-- Each partition's id with what a projection batch predicts from
-- (pg/project.go, ensurePartitions): its next_offset and its queue's
-- encryption_enabled, as of the lookup. Read without a lock: a prediction
-- made from it is checked under the lock by write_segments.
CREATE OR REPLACE FUNCTION queen.partition_states(queues text[], names text[])
RETURNS TABLE (queue text, partition text, id uuid, next_offset bigint, encryption_enabled boolean)
LANGUAGE plpgsql STABLE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        SELECT k.q, k.p, p.id, p.next_offset, p.encryption_enabled
        FROM unnest(queues, names) AS k(q, p)
        -- LIMIT keeps the lookup a subquery run per key (not merged into a join
        -- the planner could reorder to walk queues or partitions).
        CROSS JOIN LATERAL (SELECT p.id, p.next_offset, q.encryption_enabled FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
                            WHERE q.name = k.q AND p.name = k.p LIMIT 1) p;
END
$$;

-- partition_ids is partition_states without the state, for brokers of the
-- version before (this version calls partition_states).
CREATE OR REPLACE FUNCTION queen.partition_ids(queues text[], names text[])
RETURNS TABLE (queue text, partition text, id uuid)
LANGUAGE sql STABLE
AS $$
    SELECT s.queue, s.partition, s.id FROM queen.partition_states(queues, names) s
$$;

-- Creates the missing partitions of existing queues ($1[i], $2[i]), in
-- (queue id, name) order, with default options.
CREATE OR REPLACE FUNCTION queen.create_partitions(queues text[], names text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    INSERT INTO queen.partitions (queue_id, name)
    SELECT q.id, k.p FROM unnest(queues, names) AS k(q, p)
    CROSS JOIN LATERAL (SELECT q.id FROM queen.queues q WHERE q.name = k.q LIMIT 1) q
    ORDER BY q.id, k.p
    ON CONFLICT (queue_id, name) DO NOTHING;
END
$$;

-- Locks the partitions of a projection batch in id order (NO KEY UPDATE:
-- only next_offset changes) and returns what the batch needs of them.
CREATE OR REPLACE FUNCTION queen.lock_partitions(ids uuid[])
RETURNS TABLE (id uuid, next_offset bigint, dedup_window_seconds integer, encryption_enabled boolean)
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        SELECT p.id, p.next_offset, q.dedup_window_seconds, q.encryption_enabled
        FROM queen.partitions p
        -- A subquery per partition (LIMIT 1, as in partition_ids): the
        -- PL/pgSQL plan sees the array's length and would otherwise join
        -- a few queues by filtering every partition against them.
        CROSS JOIN LATERAL (SELECT q.dedup_window_seconds, q.encryption_enabled FROM queen.queues q
                            WHERE q.id = p.queue_id LIMIT 1) q
        WHERE p.id = ANY(ids) ORDER BY p.id FOR NO KEY UPDATE OF p;
END
$$;

-- Moves the partitions' next offsets ($1[i] to $2[i]) after a batch: what
-- brokers before write_segments call (kept for a rolling upgrade; this
-- version no longer does).
CREATE OR REPLACE FUNCTION queen.advance_partitions(ids uuid[], nexts bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    UPDATE queen.partitions p SET next_offset = v.next, last_message_at = now()
    FROM unnest(ids, nexts) AS v(id, next) WHERE p.id = v.id;
END
$$;

-- Writes the segments of a projection batch (what brokers before
-- store_segments, below, call; kept for a rolling upgrade): locks the
-- partitions ids in id order by updating them (NO KEY UPDATE, as
-- lock_partitions: no deadlock between brokers; a no-op where the batch
-- holds them already), checks that partition ids[i] is at next_offset bases[i] and that its
-- queue's encryption_enabled is encrypt[i] (not checked where encrypt[i]
-- is NULL, or encrypt is: the caller read it under the same lock), moves
-- next_offset to bases[i] +
-- counts[i] and stores bodies[i] as its segment of offsets bases[i] ..
-- bases[i] + counts[i] - 1. A partition that is gone or not in that state
-- raises SQLSTATE QN001 before anything is written, which rolls the
-- transaction back: a batch whose offsets the broker predicted from its
-- own last commit (one round trip) is then projected again the long way,
-- locking and reading the partitions first. One statement for what took a
-- lock, an offset update and a segment insert.
CREATE OR REPLACE FUNCTION queen.write_segments(ids uuid[], bases bigint[], counts integer[], encrypt boolean[], bodies bytea[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    moved bigint;
BEGIN
    -- The update locks the rows itself, in id order: the sorted subquery
    -- is not flattened and the pinned plan is a nested loop with it
    -- outside (see EXPLAIN in docs/decisions.md), which updates rows in
    -- the order of its outer side. A separate FOR NO KEY UPDATE pass (the
    -- version before) cost as much as the update again: a second visit
    -- and a WAL record per row. Should a plan ever take another order, two
    -- brokers meeting on the same partitions deadlock, PostgreSQL aborts
    -- one batch and Project retries it (a deadlock is retryable): slower,
    -- never wrong. A row moved by another transaction meanwhile fails
    -- next_offset = v.base when rechecked after its lock (QN001 below).
    UPDATE queen.partitions p SET next_offset = v.base + v.n, last_message_at = now()
    FROM (SELECT * FROM unnest(ids, bases, counts, encrypt) AS u(id, base, n, enc) ORDER BY u.id) AS v
    WHERE p.id = v.id AND p.next_offset = v.base
      AND (v.enc IS NULL OR (SELECT q.encryption_enabled FROM queen.queues q WHERE q.id = p.queue_id) = v.enc);
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved <> cardinality(ids) THEN
        RAISE EXCEPTION 'queen: % of % partitions gone or not at the predicted offset', cardinality(ids) - moved, cardinality(ids)
            USING ERRCODE = 'QN001';
    END IF;
    INSERT INTO queen.segments (partition_id, base_offset, last_offset, body)
    SELECT v.id, v.base, v.base + v.n - 1, v.body FROM unnest(ids, bases, counts, bodies) AS v(id, base, n, body);
END
$$;

-- store_segments is write_segments with the encryption check per queue
-- instead of per partition (brokers of the version before call it, and
-- write_segments stays for those before them; pg/project.go calls
-- store_segments_packed, the same with the bodies in one bytea, which
-- this form now packs them into): it moves partition ids[i] from
-- next_offset bases[i] to bases[i] + counts[i] and stores bodies[i] as its
-- segment, as write_segments does, locking in id order by the update;
-- then, where queues is not NULL, checks that queue queues[j] has
-- encryption_enabled = encrypt[j] (every queue of the batch's partitions,
-- named as the batch's items name them: a partition's queue never
-- changes, and a queue deleted and created again under its name has new
-- partitions, which the update does not find). A partition gone or not
-- at bases[i], or a queue not in that state, raises SQLSTATE QN001, which
-- rolls the transaction back before it commits. The check per partition
-- (a queue probe for each updated row) was about a fifth of the update at
-- hundreds of partitions a batch; a batch names one or a few queues. The
-- segments go in in the order of ids, which pg/project.go sorts (sortIDs):
-- their index entries then go in key order. bodies comes last: the broker
-- encodes it into a buffer sized for it (pg/pgarray.go), which a parameter
-- after it would outgrow.
CREATE OR REPLACE FUNCTION queen.store_segments(ids uuid[], bases bigint[], counts integer[], queues text[], encrypt boolean[], bodies bytea[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    offs integer[];
    lens integer[];
    pack bytea;
BEGIN
    -- The bodies packed into one bytea with their offsets and lengths, and
    -- everything else done by store_segments_packed (below): the same
    -- checks, locks, order and SQLSTATEs. Only brokers of the version
    -- before call this form; the pack costs them one more copy of the
    -- bodies.
    SELECT array_agg(u.o ORDER BY u.i), array_agg(u.l ORDER BY u.i), string_agg(u.b, ''::bytea ORDER BY u.i)
    INTO offs, lens, pack
    FROM (SELECT i, b, octet_length(b) AS l,
                 coalesce(sum(octet_length(b)) OVER (ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::integer AS o
          FROM unnest(bodies) WITH ORDINALITY AS x(b, i)) AS u;
    PERFORM queen.store_segments_packed(ids, bases, counts, queues, encrypt,
        coalesce(offs, '{}'), coalesce(lens, '{}'), coalesce(pack, ''::bytea));
END
$$;

-- store_segments_packed is store_segments (same checks, locks, order and
-- SQLSTATEs) with the bodies sent as one bytea, bodies, instead of a
-- bytea[]: segment i's body is the body_lens[i] bytes at byte offset
-- body_offsets[i] (0-based) of bodies, and plain_lens[i] is the length of
-- its version-1 (uncompressed) body, stored as plain_bytes (NULL
-- plain_lens: unknown, NULL). pg/project.go calls it;
-- store_segments, which brokers of the version before call, packs its
-- bytea[] and calls it. PostgreSQL
-- builds a received bytea[] anew (a zeroed allocation of the whole array,
-- then every element copied in: 22% of the projector backend's CPU at
-- 8 x 100 pushes over 10 partitions), where a bytea is copied once and
-- each body cut out of it by substring (docs/decisions.md, "Segment
-- bodies as one bytea"). bodies comes last: the broker encodes it into a
-- buffer sized for it (pg/pgarray.go), which a parameter after it would
-- outgrow.
CREATE OR REPLACE FUNCTION queen.store_segments_packed(ids uuid[], bases bigint[], counts integer[], queues text[], encrypt boolean[],
    body_offsets integer[], body_lens integer[], plain_lens integer[], bodies bytea)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    moved bigint;
    total bigint;
    least integer;
    nulls bigint;
BEGIN
    -- In id order, as write_segments (see there). The arrays are unnested
    -- in the select list, not in FROM: a set-returning function in FROM is
    -- a Function Scan, which copies every row it returns into a
    -- tuplestore before the first is read, where the select list's
    -- ProjectSet hands them on one at a time. The arrays are of one
    -- length, so the two forms give the same rows (PostgreSQL runs
    -- select-list functions in lockstep).
    UPDATE queen.partitions p SET next_offset = v.base + v.n, last_message_at = now()
    FROM (SELECT unnest(ids) AS id, unnest(bases) AS base, unnest(counts) AS n ORDER BY 1) AS v
    WHERE p.id = v.id AND p.next_offset = v.base;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved <> cardinality(ids) THEN
        RAISE EXCEPTION 'queen: % of % partitions gone or not at the predicted offset', cardinality(ids) - moved, cardinality(ids)
            USING ERRCODE = 'QN001';
    END IF;
    IF queues IS NOT NULL AND EXISTS (
        SELECT 1 FROM unnest(queues, encrypt) AS k(q, e)
        WHERE NOT EXISTS (SELECT 1 FROM queen.queues x WHERE x.name = k.q AND x.encryption_enabled = k.e)) THEN
        RAISE EXCEPTION 'queen: the encryption of a queue of the batch is not the predicted one'
            USING ERRCODE = 'QN001';
    END IF;
    -- The layout is the broker's (pg/pgarray.go, packSegments: the offsets
    -- are running sums of the lengths of the bodies as packed). Checked
    -- here, cheaply: one offset and one
    -- length per partition, no length below 0, the lengths adding up to
    -- bodies. A layout that fails it would store wrong bytes as some
    -- segment's body: refused (22023, not QN001: the batch is not retried
    -- the long way). (A check of every offset, generate_subscripts over
    -- the arrays, took 0.5 ms a 1,000 segments.)
    SELECT coalesce(sum(l), 0), min(l), count(*) - count(l) INTO total, least, nulls FROM (SELECT unnest(body_lens) AS l) AS t;
    IF coalesce(cardinality(body_offsets), 0) <> coalesce(cardinality(ids), 0)
        OR coalesce(cardinality(body_lens), 0) <> coalesce(cardinality(ids), 0)
        OR total <> coalesce(octet_length(bodies), 0) OR least < 0 OR nulls > 0
        OR (plain_lens IS NOT NULL AND coalesce(cardinality(plain_lens), 0) <> coalesce(cardinality(ids), 0)) THEN
        RAISE EXCEPTION 'queen: segment bodies do not match their layout' USING ERRCODE = '22023';
    END IF;
    -- plain_lens NULL: unnest gives no rows, which the select list's
    -- lockstep pads with NULLs (plain_bytes unknown).
    INSERT INTO queen.segments (partition_id, base_offset, last_offset, body, plain_bytes)
    SELECT v.id, v.base, v.base + v.n - 1, substring(bodies FROM v.o + 1 FOR v.l), v.p
    FROM (SELECT unnest(ids) AS id, unnest(bases) AS base, unnest(counts) AS n, unnest(body_offsets) AS o, unnest(body_lens) AS l,
        unnest(plain_lens) AS p) AS v;
END
$$;

-- The form without plain_lens is what brokers of the version before call
-- (kept for a rolling upgrade): their segments get no plain_bytes.
CREATE OR REPLACE FUNCTION queen.store_segments_packed(ids uuid[], bases bigint[], counts integer[], queues text[], encrypt boolean[],
    body_offsets integer[], body_lens integer[], bodies bytea)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM queen.store_segments_packed(ids, bases, counts, queues, encrypt, body_offsets, body_lens, NULL::integer[], bodies);
END
$$;

-- Packed messages: one row holds offsets base_offset..last_offset of one
-- partition, written by one projector batch. body layout: pg/segment.go.
CREATE TABLE IF NOT EXISTS queen.segments (
    partition_id uuid NOT NULL,
    base_offset  bigint NOT NULL,
    last_offset  bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    body         bytea NOT NULL,
    plain_bytes  integer,
    PRIMARY KEY (partition_id, base_offset)
);
-- No foreign key to queen.partitions: its per-row check (an SPI query
-- taking FOR KEY SHARE on the partition row after every segment insert)
-- was 11% of a projection batch's PostgreSQL CPU at 64 producers x 1 item
-- (perf of the backend), and it guards nothing write_segments does not:
-- the only writer of segments locks and moves its partition rows in the
-- same transaction and raises QN001 for one that is gone, so a segment
-- never names a partition that does not exist. What the key's ON DELETE
-- CASCADE did, the statement trigger below does: a deleted partition's
-- segments go with it (a queue delete cascades to its partitions, which
-- fires it), whichever broker version deletes it.
SELECT queen.ddl_once(EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'queen.segments'::regclass
    AND conname = 'segments_partition_id_fkey'), 'ALTER TABLE queen.segments DROP CONSTRAINT segments_partition_id_fkey');
-- plain_bytes is the length of the segment's version-1 body (pg/segment.go),
-- what a reader holds once a compressed body is decompressed: the pops'
-- byte bound (QUEEN_MAX_POP_BYTES, pg/claim.go, popBytesSQL) sums it. NULL
-- in segments that brokers before it wrote; readers take
-- octet_length(body) for those. A column without a default is added to the
-- catalog only, without a rewrite of the table.
SELECT queen.ddl_once(queen.column_missing('queen.segments', 'plain_bytes'),
    'ALTER TABLE queen.segments ADD COLUMN plain_bytes integer');
-- Its plan is pinned as the projector's are: the planner knows nothing of
-- the transition table, and a hash join would read every segment of every
-- queue to delete one queue's; an index probe per deleted partition is
-- right at every size.
CREATE OR REPLACE FUNCTION queen.delete_partition_segments()
RETURNS trigger
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
BEGIN
    DELETE FROM queen.segments s USING gone g WHERE s.partition_id = g.id;
    RETURN NULL;
END
$$;
-- Created once (CREATE OR REPLACE TRIGGER locks queen.partitions against
-- writes until the schema transaction commits, even when nothing changes).
SELECT queen.ddl_once(NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'queen.partitions'::regclass
    AND tgname = 'partitions_delete_segments'),
    'CREATE TRIGGER partitions_delete_segments AFTER DELETE ON queen.partitions
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queen.delete_partition_segments()');
-- Segment bodies were compressed by PostgreSQL (lz4 rather than the
-- default pglz: with pglz the segment insert took 5.1 ms of PostgreSQL time
-- per 800-message batch of 8 x 100 pushes of 256-byte payloads). The
-- method stays set for the bodies stored that way; a server built without
-- lz4 keeps pglz. Set only while the column has another method (the ALTER
-- takes an ACCESS EXCLUSIVE lock).
DO $$ BEGIN
    IF (SELECT attcompression FROM pg_attribute WHERE attrelid = 'queen.segments'::regclass AND attname = 'body') IS DISTINCT FROM 'l' THEN
        ALTER TABLE queen.segments ALTER COLUMN body SET COMPRESSION lz4;
    END IF;
EXCEPTION WHEN feature_not_supported THEN NULL;
END $$;
-- Now the broker compresses a segment body itself where that pays (S2,
-- version 2 of the body: pg/segment.go), and stores the others as they
-- are, because they do not compress (payloads already compressed or
-- encrypted) or are small. So PostgreSQL's own attempt is wasted work:
-- the column is EXTERNAL, a body over TOAST's 2 kB threshold goes out of
-- line without it (docs/decisions.md, "Segment bodies compressed by the
-- broker"). A database from an older version gets the setting on its
-- first start, for the rows written after it (no rewrite; bodies stored
-- compressed by PostgreSQL stay so and read as before). Only then: SET
-- STORAGE takes an ACCESS EXCLUSIVE lock.
DO $$ BEGIN
    IF (SELECT attstorage FROM pg_attribute WHERE attrelid = 'queen.segments'::regclass AND attname = 'body') <> 'e' THEN
        ALTER TABLE queen.segments ALTER COLUMN body SET STORAGE EXTERNAL;
    END IF;
END $$;

-- Dedup sidecar (pg/dedup.go): one row per projection batch. key_hashes
-- holds a 64-bit hash per client transactionId stored by the batch (of
-- partition and key) and one per 10 ms tick of the batch's broker-minted
-- ids (rows of older versions: one per partition and tick); partition_ids
-- and base_offsets name the segment each
-- of the batch's partitions got. A hash hit names a segment, whose messages
-- are compared byte for byte with the probed key, so the probe stays
-- exact. Per message: 8 bytes of array and one GIN entry for a client
-- transactionId, nothing for a minted id; per partition of a batch 24
-- bytes. expires_at is when the newest of its messages leaves the longest
-- dedup window of its queues (as it was when the row was written); the
-- sweep deletes the row a grace later. GIN fastupdate is off: its pending
-- list would be scanned whole by every probe (measured: 27 us per probed
-- key instead of 3). No statistics on the arrays: the probes pin their
-- plans, and ANALYZE of 800-element arrays took 0.2 s per run. No foreign
-- key (a row spans partitions and queues): a deleted queue's keys stay in
-- the rows they share until those expire, and a deleted partition's id
-- never names a new one.
CREATE TABLE IF NOT EXISTS queen.dedup_batches (
    expires_at    timestamptz NOT NULL,
    partition_ids uuid[] NOT NULL,
    base_offsets  bigint[] NOT NULL,
    key_hashes    bigint[] NOT NULL
);
SELECT queen.ddl_once(to_regclass('queen.dedup_batches_keys') IS NULL,
    'CREATE INDEX dedup_batches_keys ON queen.dedup_batches USING gin (key_hashes) WITH (fastupdate = off)');
SELECT queen.ddl_once(to_regclass('queen.dedup_batches_expires_at') IS NULL,
    'CREATE INDEX dedup_batches_expires_at ON queen.dedup_batches (expires_at)');
ALTER TABLE queen.dedup_batches ALTER COLUMN key_hashes SET STATISTICS 0,
    ALTER COLUMN partition_ids SET STATISTICS 0, ALTER COLUMN base_offsets SET STATISTICS 0;
-- key_hashes (random 64-bit hashes) and partition_ids (random UUIDs) never
-- compress: stored EXTERNAL, a row over TOAST's 2 kB threshold moves them
-- out of line without a pglz attempt first (base_offsets, which compress
-- about tenfold, stay EXTENDED). A database from an older version gets the
-- setting on its first start for the rows written after it; no rewrite.
-- Only then: SET STORAGE takes an ACCESS EXCLUSIVE lock, which every
-- start would otherwise wait for behind other brokers' batches.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'queen.dedup_batches'::regclass
               AND attname IN ('key_hashes', 'partition_ids') AND attstorage <> 'e') THEN
        ALTER TABLE queen.dedup_batches ALTER COLUMN key_hashes SET STORAGE EXTERNAL,
            ALTER COLUMN partition_ids SET STORAGE EXTERNAL;
    END IF;
END $$;

-- layout: 2 on the rows of brokers that mark every client key in the
-- minted form (UUIDv7 text) they keep under its own keyHash, outside its
-- tick, with its tick's hashedTickKey (pg/dedup.go); NULL on the rows of
-- earlier versions, which did not, and which kept minted ids per partition
-- (mintedPartKey). While any row of the table has no layout, a batch's
-- minted-form keys are probed by their keyHash and mintedPartKey too; once
-- the sweep has removed the last one, their ticks and marks are enough
-- (assert_tick_rows). The partial index finds such a row in one page, and
-- is empty once they are gone. On the first start of an upgraded database
-- every row is one of them: building the index reads the table once. Both
-- only when missing: ADD COLUMN IF NOT EXISTS takes an ACCESS EXCLUSIVE
-- lock even when the column exists, and CREATE INDEX IF NOT EXISTS a SHARE
-- lock, until the schema transaction commits, which would hold up every
-- broker's batches at every start. An upgraded database got both at the
-- top of this file; this adds them to a table created just above.
SELECT queen.ddl_once(queen.column_missing('queen.dedup_batches', 'layout'),
    'ALTER TABLE queen.dedup_batches ADD COLUMN layout smallint');
SELECT queen.ddl_once(to_regclass('queen.dedup_batches_unmarked') IS NULL,
    'CREATE INDEX dedup_batches_unmarked ON queen.dedup_batches (expires_at) WHERE layout IS NULL');

-- queen.dedup_runs is the sidecar layout before queen.dedup_batches (one
-- row per partition and batch, indexed by a GIN on key_hashes and a btree
-- on (partition_id, minted_lo)). It is not created any more; in a
-- database upgraded from it, it is probed (dedup_hash_probe,
-- dedup_minted_probe below) and swept by its accepted_at while it holds
-- rows, so that its entries keep their windows; it is never written.

-- Exact dedup entries, (partition, transactionId) -> the latest stored
-- message: written by versions before the hash sidecar (spilled = false;
-- probed for every client key while any is left, swept by the same window
-- rule) and by retention, which copies here the keys of deleted segments'
-- messages still inside their window (spilled = true; probed for sidecar
-- hits whose segment is gone). No foreign key to partitions: its per-row
-- check was about 40% of the insert (pgbench, 400-row inserts: 9.2 ms with
-- it, 6.2 ms without). pg.Store.DeleteQueue deletes a queue's entries
-- itself; an orphan could only be an expired entry, which the sweep
-- removes by accepted_at anyway.
CREATE TABLE IF NOT EXISTS queen.dedup (
    partition_id   uuid NOT NULL,
    transaction_id bytea NOT NULL,
    msg_offset     bigint NOT NULL,
    message_id     uuid NOT NULL,
    accepted_at    timestamptz NOT NULL,
    PRIMARY KEY (partition_id, transaction_id)
);
SELECT queen.ddl_once(to_regclass('queen.dedup_accepted_at') IS NULL,
    'CREATE INDEX dedup_accepted_at ON queen.dedup (accepted_at)');
SELECT queen.ddl_once(EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = 'queen.dedup'::regclass
    AND conname = 'dedup_partition_id_fkey'), 'ALTER TABLE queen.dedup DROP CONSTRAINT dedup_partition_id_fkey');
SELECT queen.ddl_once(queen.column_missing('queen.dedup', 'spilled'),
    'ALTER TABLE queen.dedup ADD COLUMN spilled boolean NOT NULL DEFAULT false');

-- The dedup probes. The planner settings are pinned because the sidecar
-- grows fast from empty: until autovacuum analyzes it, the planner
-- believes it tiny and scans it whole (seen with the exact table: 335
-- sequential scans reading 21 M rows in an 8 s bench, the probe at 18 ms
-- of a 24 ms batch). Index lookups are right at every size.
--
-- dedup_batch_probe: the rows of queen.dedup_batches that hold any of
-- hashes (candidates, to be confirmed against their segments), each once.
-- The GIN index is scanned once per 16 hashes. A GIN scan of n keys does
-- work quadratic in n: it compares each search key with every one before
-- it (ginFillScanEntry merges equal ones) and asks the array opclass's
-- consistent function, which walks all n entries, about n times
-- (startScanKey; ginarraytriconsistent). In scans of 256 that was 6.5% of
-- the projector backend's CPU at 8 x 100 pushes with client keys (perf:
-- ginarraytriconsistent 3.1%, ginNewScanKey 3.3%), in scans of 16 2.1%;
-- what is left is the descent of the entry tree per key, which no piece
-- size changes (docs/decisions.md, "Sidecar probe in pieces of 16"). The
-- pieces are rescans of one statement (a LATERAL join over the piece
-- starts), not a statement each. (Before: pieces of 256 against one scan,
-- 800 keys 0.55 ms against 0.80 ms, 1,600 keys 1.1 against 2.3 ms; a
-- batch of 10,000 keys in one scan about 90 ms.) A row is returned once
-- however many of its keys match: a probe of 16 keys or fewer is one scan
-- (an index scan returns a row once); a longer one collects the ctids
-- each piece hits, then reads the rows they name (ctid = ANY: a TID scan
-- sorts the ctids and reads each row once), linear in the hits. An older
-- version checked each hit against the rows returned so far, quadratic in
-- the hits: 10,000 keys hitting 10,000 rows, one each, took 474-505 ms,
-- one scan 182-189 ms, collected ctids 20-25 ms.
--
-- plan_cache_mode = force_generic_plan (here and in assert_new_keys): the
-- generic plan (the piece starts' function scan estimated at 1,000 rows)
-- looks dearer than a custom one (the array known, 2 pieces), so
-- PL/pgSQL's plan cache planned the statement afresh on every call, about
-- as long as a small probe's execution (pg_stat_statements at 64 x 1
-- pushes with client keys: 0.060 ms planning and 0.058 ms execution a
-- batch of about 30 keys). The plan is the same either way: a nested loop
-- of a bitmap scan of the GIN index per piece (docs/decisions.md, "A
-- client key's fixed cost per batch: the probe's plan").
CREATE OR REPLACE FUNCTION queen.dedup_batch_probe(hashes bigint[])
RETURNS TABLE (partition_ids uuid[], base_offsets bigint[], key_hashes bigint[])
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    n integer := coalesce(cardinality(hashes), 0);
BEGIN
    IF n <= 16 THEN
        RETURN QUERY
            SELECT d.partition_ids, d.base_offsets, d.key_hashes FROM queen.dedup_batches d WHERE d.key_hashes && hashes;
        RETURN;
    END IF;
    -- The ctids each piece hits, then those rows (a TID scan reads a ctid
    -- listed twice once; a STABLE function's statements share one
    -- snapshot: the ctids stay valid).
    RETURN QUERY
        SELECT d.partition_ids, d.base_offsets, d.key_hashes FROM queen.dedup_batches d
        WHERE d.ctid = ANY (ARRAY(
            SELECT x.ctid FROM generate_series(1, n, 16) AS g(i)
            CROSS JOIN LATERAL (SELECT d2.ctid FROM queen.dedup_batches d2 WHERE d2.key_hashes && hashes[g.i:g.i + 15]) x));
END
$$;

-- dedup_hash_probe (queen.dedup_runs of an upgraded database; nothing
-- without it): the (partition, offset, hash) of every offset whose key
-- hash is one of hashes.
CREATE OR REPLACE FUNCTION queen.dedup_hash_probe(hashes bigint[])
RETURNS TABLE (partition_id uuid, msg_offset bigint, key_hash bigint)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF to_regclass('queen.dedup_runs') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT d.partition_id, d.base_offset + x.i - 1, x.h
        FROM queen.dedup_runs d CROSS JOIN LATERAL unnest(d.key_hashes) WITH ORDINALITY AS x(h, i)
        WHERE d.key_hashes && hashes AND x.h = ANY(hashes);
END
$$;

-- assert_new_keys: raises SQLSTATE QN002 when a row of queen.dedup_batches
-- holds any of hashes (a candidate; scanned in pieces of 16 as
-- dedup_batch_probe does, stopping at the first piece that hits). A batch whose
-- offsets the broker predicted is sent in one pipeline with its COMMIT
-- (pg/project.go, projectPredicted): this runs after write_segments has
-- locked the batch's partitions and before the batch's own sidecar row goes
-- in, and a hit (a duplicate, a key repeated after its window, a hash
-- collision, a minted tick key equal to a client key's hash) rolls the
-- batch back to be decided the long way. The older layouts (queen.dedup,
-- queen.dedup_runs) are not probed here: while either holds entries, a
-- batch with client keys is never predicted (Store.legacyDedup).
CREATE OR REPLACE FUNCTION queen.assert_new_keys(hashes bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM generate_series(1, coalesce(cardinality(hashes), 0), 16) AS g(i)
    WHERE EXISTS (SELECT 1 FROM queen.dedup_batches d WHERE d.key_hashes && hashes[g.i:g.i + 15])
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queen: the dedup sidecar names an offset for a key of the batch' USING ERRCODE = 'QN002';
    END IF;
END
$$;

-- assert_known_rows: raises SQLSTATE QN002 when a row of queen.dedup_batches
-- holds any of ticks (minted keys of 10 ms ticks, pg/dedup.go mintedKey:
-- rows with minted ids of the tick, or with client transactionIds in the
-- UUIDv7 text form stored under it) and one of the partitions parts, and
-- is not one of the rows named by (pids[i], bases[i]): a row's first
-- partition and that partition's segment base offset. A predicted batch
-- (pg/project.go, projectPredicted) sends its UUIDv7 keys' ticks and
-- partitions and the rows its broker committed with those ticks, which it
-- knows to hold none of the batch's keys (pg/tickcache.go); any other row
-- of those ticks and partitions (another broker's, a transactional push's,
-- one the broker no longer remembers) may hold one, and the batch rolls
-- back to be decided the long way, which reads and compares those rows'
-- segments. A row of the ticks that holds none of the partitions cannot
-- hold an original of the batch's keys (dedup is per partition). Runs
-- after store_segments has locked the batch's partitions, as
-- assert_new_keys.
CREATE OR REPLACE FUNCTION queen.assert_known_rows(ticks bigint[], parts uuid[], pids uuid[], bases bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM queen.dedup_batches d
    WHERE d.key_hashes && ticks
      AND d.partition_ids && parts
      AND NOT EXISTS (SELECT 1 FROM unnest(pids, bases) AS k(pid, base)
                      WHERE k.pid = d.partition_ids[1] AND k.base = d.base_offsets[1])
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queen: the dedup sidecar holds a row of the batch''s ticks that its broker does not know' USING ERRCODE = 'QN002';
    END IF;
END
$$;

-- dedup_minted_probe (queen.dedup_runs of an upgraded database; nothing
-- without it): for each (pid, id) (floor: the smallest minted_lo of a run
-- that can hold id), the offset of the minted id in partition pid, with
-- the key's ordinal.
CREATE OR REPLACE FUNCTION queen.dedup_minted_probe(pids uuid[], ids uuid[], floors uuid[])
RETURNS TABLE (ord bigint, msg_offset bigint)
LANGUAGE plpgsql STABLE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
BEGIN
    IF to_regclass('queen.dedup_runs') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT k.ord, d.base_offset + x.i - 1
        FROM unnest(pids, ids, floors) WITH ORDINALITY AS k(pid, id, floor, ord)
        JOIN queen.dedup_runs d ON d.partition_id = k.pid AND d.minted_lo >= k.floor AND d.minted_lo <= k.id
            AND d.minted_hi >= k.id AND k.id = ANY(d.minted_ids)
        CROSS JOIN LATERAL (
            SELECT z.i FROM unnest(d.key_hashes) WITH ORDINALITY AS z(h, i) WHERE z.h = 0
            ORDER BY z.i OFFSET array_position(d.minted_ids, k.id) - 1 LIMIT 1) x;
END
$$;

-- dedup_probe: the exact entries of queen.dedup for a batch's keys.
CREATE OR REPLACE FUNCTION queen.dedup_probe(pids uuid[], txids bytea[])
RETURNS TABLE (partition_id uuid, transaction_id bytea, msg_offset bigint, message_id uuid, accepted_at timestamptz)
LANGUAGE plpgsql STABLE
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        SELECT d.partition_id, d.transaction_id, d.msg_offset, d.message_id, d.accepted_at
        FROM unnest(pids, txids) AS k(pid, txid)
        JOIN queen.dedup d ON d.partition_id = k.pid AND d.transaction_id = k.txid;
END
$$;

-- assert_tick_rows: what a predicted batch (pg/project.go,
-- projectPredicted) asserts for its client keys in the minted form when no
-- row of the sidecar is of an earlier layout (dedup_batches.layout): it
-- then sends neither their keyHash nor their mintedPartKey, and this
-- raises SQLSTATE QN004 when a row of an earlier layout exists after all
-- (a broker of an earlier version wrote one since), and QN002 when a row
-- holding one of the partitions parts holds one of marks (hashedTickKey of
-- the keys' ticks: it keeps a minted-form key of such a tick under its own
-- keyHash, which only the long way probes) or holds one of ticks
-- (mintedKey) and is not one of the rows named by (pids[i], bases[i]) (as
-- assert_known_rows). Either error rolls the batch back to the long way.
-- Under the batch's partition locks, so a row of another broker committed
-- before them is seen, and one committed after them probes this batch's.
-- Its last check is assert_known_rows' own, written out rather than
-- called: calling it measured 0.4-0.7 µs of PostgreSQL CPU a message more
-- in 2 of 3 pairs at 8 x 100 with UUIDv7 keys (docs/decisions.md).
CREATE OR REPLACE FUNCTION queen.assert_tick_rows(ticks bigint[], marks bigint[], parts uuid[], pids uuid[], bases bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM queen.dedup_batches d WHERE d.layout IS NULL LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queen: the dedup sidecar holds rows of an earlier layout' USING ERRCODE = 'QN004';
    END IF;
    PERFORM 1 FROM queen.dedup_batches d
    WHERE d.key_hashes && marks
      AND d.partition_ids && parts
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queen: the dedup sidecar holds a key of the batch''s ticks under its own hash' USING ERRCODE = 'QN002';
    END IF;
    PERFORM 1 FROM queen.dedup_batches d
    WHERE d.key_hashes && ticks
      AND d.partition_ids && parts
      AND NOT EXISTS (SELECT 1 FROM unnest(pids, bases) AS k(pid, base)
                      WHERE k.pid = d.partition_ids[1] AND k.base = d.base_offsets[1])
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queen: the dedup sidecar holds a row of the batch''s ticks that its broker does not know' USING ERRCODE = 'QN002';
    END IF;
END
$$;

-- Projector checkpoints: the last WAL index each broker committed.
CREATE TABLE IF NOT EXISTS queen.projector_checkpoints (
    broker_id  uuid PRIMARY KEY,
    wal_index  bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- CRC-32C of the WAL record at wal_index: tells a WAL directory that is not
-- the one this checkpoint was written from (see pg.Checkpoint).
SELECT queen.ddl_once(queen.column_missing('queen.projector_checkpoints', 'record_crc32c'),
    'ALTER TABLE queen.projector_checkpoints ADD COLUMN record_crc32c bigint');
-- A WAL record with more items than one projection transaction takes (a push
-- of a million tiny items) is projected in pieces, each its own transaction:
-- then the first partial_items items of record partial_index (always
-- wal_index + 1; any other value is stale and means nothing) are committed
-- too, and partial_crc32c is that record's CRC-32C (see pg.Checkpoint).
SELECT queen.ddl_once(queen.column_missing('queen.projector_checkpoints', 'partial_crc32c'),
    'ALTER TABLE queen.projector_checkpoints ADD COLUMN IF NOT EXISTS partial_index bigint,
        ADD COLUMN IF NOT EXISTS partial_items bigint, ADD COLUMN IF NOT EXISTS partial_crc32c bigint');

-- System flags such as maintenance_mode ({"enabled": bool}).
CREATE TABLE IF NOT EXISTS queen.system_state (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Consumer cursors: one row per (partition, consumer group). Everything
-- below cursor_offset is consumed; a lease covers cursor_offset..lease_end.
CREATE TABLE IF NOT EXISTS queen.consumer_cursors (
    partition_id     uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group   text NOT NULL,
    cursor_offset    bigint NOT NULL DEFAULT 0,
    lease_id         uuid,
    lease_expires_at timestamptz,
    lease_end        bigint,
    acked            bigint[] NOT NULL DEFAULT '{}',
    retry_count      integer NOT NULL DEFAULT 0,
    last_consumed_at timestamptz,
    total_consumed   bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
-- Every pop and ack rewrites its cursor row's lease columns. With no
-- index on a column those updates change, each one can be HOT (the new
-- version on the same page, no index entry): the lease is found by its
-- id through lease_key, a number fixed when the row is made and carried
-- inside every lease id minted for the row (pg/leasekey.go), not through
-- an index on lease_id (which made every cursor update a new entry in
-- both indexes and left the table and its indexes growing with dead
-- versions between vacuums; docs/consume.md, "Cursor updates are HOT").
-- fillfactor 50 leaves room on each page for the new versions, as for
-- queen.partitions. The column is added to an existing table once (which
-- fills it for the rows there); the old index is dropped.
CREATE SEQUENCE IF NOT EXISTS queen.consumer_cursors_lease_key_seq;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'queen.consumer_cursors'::regclass
                   AND attname = 'lease_key' AND NOT attisdropped) THEN
        ALTER TABLE queen.consumer_cursors ADD COLUMN lease_key bigint NOT NULL
            DEFAULT nextval('queen.consumer_cursors_lease_key_seq');
        ALTER SEQUENCE queen.consumer_cursors_lease_key_seq OWNED BY queen.consumer_cursors.lease_key;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = 'queen.consumer_cursors'::regclass
                   AND 'fillfactor=50' = ANY(coalesce(reloptions, '{}'))) THEN
        ALTER TABLE queen.consumer_cursors SET (fillfactor = 50);
    END IF;
END $$;
SELECT queen.ddl_once(to_regclass('queen.consumer_cursors_lease_key') IS NULL,
    'CREATE UNIQUE INDEX consumer_cursors_lease_key ON queen.consumer_cursors (lease_key)');
DROP INDEX IF EXISTS queen.consumer_cursors_lease;

-- Subscriptions of named consumer groups: where a group starts in a
-- partition it has no cursor for yet (mode all | new | timestamp).
CREATE TABLE IF NOT EXISTS queen.consumer_groups (
    queue_id          uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    consumer_group    text NOT NULL,
    subscription_mode text NOT NULL,
    subscription_from timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- Dead letters: messages a group gave up on (retries exhausted or dlq ack).
CREATE TABLE IF NOT EXISTS queen.dead_letters (
    id             bigserial PRIMARY KEY,
    partition_id   uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    consumer_group text NOT NULL,
    msg_offset     bigint NOT NULL,
    message_id     uuid NOT NULL,
    transaction_id bytea NOT NULL,
    error          text,
    retry_count    integer NOT NULL DEFAULT 0,
    failed_at      timestamptz NOT NULL DEFAULT now()
);
SELECT queen.ddl_once(to_regclass('queen.dead_letters_partition') IS NULL,
    'CREATE INDEX dead_letters_partition ON queen.dead_letters (partition_id, consumer_group)');

-- Message traces (POST /api/v1/traces, pg/traces.go): processing events a
-- consumer records against a stored message, keyed like Queen's by
-- (partition, transactionId); message_id/msg_offset name the message the
-- key resolved to when the trace was recorded. data is the client's JSON
-- value byte for byte (bytea: jsonb would reorder and respell it). Traces
-- outlive the message's consumption and its segment's retention; they go
-- with their partition (queue delete cascades). trace_names: 0..32 names,
-- sorted and distinct.
CREATE TABLE IF NOT EXISTS queen.message_traces (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq            bigserial NOT NULL,
    partition_id   uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    transaction_id bytea NOT NULL,
    message_id     uuid NOT NULL,
    msg_offset     bigint NOT NULL,
    consumer_group text NOT NULL,
    event_type     text NOT NULL,
    data           bytea NOT NULL,
    trace_names    text[] NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
SELECT queen.ddl_once(to_regclass('queen.message_traces_message') IS NULL,
    'CREATE INDEX message_traces_message ON queen.message_traces (partition_id, transaction_id, seq)');
SELECT queen.ddl_once(to_regclass('queen.message_traces_names') IS NULL,
    'CREATE INDEX message_traces_names ON queen.message_traces USING gin (trace_names)');

-- Segments by commit time: GET /api/v1/messages walks the segments of a
-- time window newest first and stops once it has its page (pg/messages.go),
-- which without this index would read and sort every segment of the
-- matching partitions. The retention pass's age conditions and the
-- timestamp seeks filter on created_at too. One entry per segment (a
-- projector batch per partition), not per message.
SELECT queen.ddl_once(to_regclass('queen.segments_created_at') IS NULL,
    'CREATE INDEX segments_created_at ON queen.segments (created_at, partition_id, base_offset)');

-- Streams (pg/streams.go): the query registry and the per-shard state of
-- Queen's stream runtime (/streams/v1/*). A query is registered by name
-- with an opaque config hash; its state is sharded by (query, source
-- partition) and holds the client's JSON value byte for byte (bytea, as
-- payloads are) with the numeric "windowEnd" of an object value lifted
-- into window_end for the ripe-window read. State goes with its query
-- (reset wipes it, a query delete cascades) and with its source partition
-- (a queue delete cascades). key is COLLATE "C": rows are ordered and
-- prefix-matched byte for byte.
CREATE TABLE IF NOT EXISTS queen.stream_queries (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL UNIQUE,
    source_queue text NOT NULL,
    sink_queue   text,
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queen.stream_state (
    query_id     uuid NOT NULL REFERENCES queen.stream_queries(id) ON DELETE CASCADE,
    partition_id uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    key          text COLLATE "C" NOT NULL,
    value        bytea NOT NULL,
    window_end   double precision,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query_id, partition_id, key)
);
SELECT queen.ddl_once(to_regclass('queen.stream_state_partition') IS NULL,
    'CREATE INDEX stream_state_partition ON queen.stream_state (partition_id)');

-- Tombstones (pg/tombstone.go): single messages deleted by DELETE
-- /api/v1/messages/:partitionId/:transactionId. Messages are packed in
-- segments, so a deleted message stays in its segment's body and is
-- marked here by (partition, offset); pop, the message reads and the
-- counts skip marked offsets. A tombstone goes with its partition; one
-- whose segment retention removed is dead weight (about 60 bytes) until
-- then. The dedup sidecar keeps the transactionId for its window.
CREATE TABLE IF NOT EXISTS queen.tombstones (
    partition_id   uuid NOT NULL REFERENCES queen.partitions(id) ON DELETE CASCADE,
    msg_offset     bigint NOT NULL,
    transaction_id bytea NOT NULL,
    deleted_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, msg_offset)
);
-- How many messages of a partition at or after offset off are deleted
-- (0 for a NULL off): the message counts subtract it.
CREATE OR REPLACE FUNCTION queen.deleted_from(pid uuid, off bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM queen.tombstones WHERE partition_id = pid AND msg_offset >= off
$$;
