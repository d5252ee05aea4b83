package pg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/pg"
)

// TestDedupProbeChunkBoundaries: queen.dedup_batch_probe scans in pieces
// of 16 hashes (hashes[i:i+15], i = 1, 17, 33, ...). One sidecar row per
// position of interest (the first and last key of each piece, the first
// of the next, the last of the probe) holds only that position's hash; a
// probe of the first n hashes, n = 1, 15, 16, 17, 31, 32, 33, 34, 255,
// 256, 257, 514, finds exactly the rows of the positions below n, each
// once, forward and reversed, and a probe holding only one of them, at its
// own position, finds its row; a row holding a hash of several pieces, and
// a probe naming one hash in two pieces, still give that row once. The
// same probes through queen.assert_new_keys raise QN002 exactly when they
// name a stored hash.
func TestDedupProbeChunkBoundaries(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	hashes := make([]int64, 514)
	for i := range hashes {
		hashes[i] = int64(i)*104729 + 11
	}
	positions := []int{0, 1, 14, 15, 16, 17, 30, 31, 32, 33, 254, 255, 256, 257, 510, 511, 512, 513}
	pid := uuid.New()
	for _, p := range positions {
		insertSidecarRow(t, s, pid, int64(p), []int64{hashes[p]})
	}
	probe := func(h []int64) []int64 { return probeBases(t, s, h) }
	assertHit := func(h []int64) bool {
		t.Helper()
		_, err := s.Pool().Exec(ctx, `SELECT queen.assert_new_keys($1::bigint[])`, h)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "QN002" {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 34, 255, 256, 257, 511, 512, 513, 514} {
		var want []int64
		for _, p := range positions {
			if p < n {
				want = append(want, int64(p))
			}
		}
		if got := probe(hashes[:n]); !slices.Equal(got, want) {
			t.Fatalf("probe of the first %d hashes found rows %v, want %v", n, got, want)
		}
		// The same keys probed from the end: the last piece is the short one.
		rev := slices.Clone(hashes[:n])
		slices.Reverse(rev)
		if got := probe(rev); !slices.Equal(got, want) {
			t.Fatalf("probe of the first %d hashes reversed found rows %v, want %v", n, got, want)
		}
		for _, h := range [][]int64{hashes[:n], rev} {
			if hit := assertHit(h); hit != (len(want) > 0) {
				t.Fatalf("assert_new_keys of %d hashes (first %d) raised QN002 %v, want %v", n, h[0], hit, len(want) > 0)
			}
		}
	}
	// One known hash among unknown ones, at each position of interest (and
	// at the probe's end): the probe finds its row, assert_new_keys raises.
	for _, p := range positions {
		for _, n := range []int{p + 1, p + 2} {
			h := make([]int64, n)
			for i := range h {
				h[i] = -int64(i) - 1000
			}
			h[p] = hashes[p]
			if got := probe(h); !slices.Equal(got, []int64{int64(p)}) {
				t.Fatalf("probe of %d hashes, the one known at %d, found rows %v, want [%d]", n, p, got, p)
			}
			if !assertHit(h) {
				t.Fatalf("assert_new_keys of %d hashes, the one known at %d, raised no QN002", n, p)
			}
		}
	}
	// Keys the sidecar does not hold, at lengths around the pieces: no hit.
	for _, n := range []int{0, 1, 15, 16, 17, 33, 300} {
		none := make([]int64, n)
		for i := range none {
			none[i] = -int64(i) - 1000
		}
		if hit := assertHit(none); hit {
			t.Fatalf("assert_new_keys of %d unknown hashes raised QN002", n)
		}
	}

	// A row with a hash in every piece, and a probe that names a hash
	// twice, in two pieces: the row comes back once.
	insertSidecarRow(t, s, pid, -1, []int64{hashes[0], hashes[16], hashes[17], hashes[256], hashes[512], hashes[513]})
	twice := append(slices.Clone(hashes[:300]), hashes[0])
	if got := probe(twice); !slices.Equal(got, []int64{-1, 0, 1, 14, 15, 16, 17, 30, 31, 32, 33, 254, 255, 256, 257}) {
		t.Fatalf("probe with a repeated hash found rows %v, want [-1 0 1 14 15 16 17 30 31 32 33 254 255 256 257]", got)
	}
}

// TestDedupBatchOfExactlyChunkSizes: batches of exactly 16, 17, 32, 256,
// 257 and 512 distinct client keys (the probe's pieces are 16 keys: one
// piece, a piece and one key, two pieces, and so on) whose keys at the
// pieces' edges (positions 0, 14, 15, 16, 17, 30, 31, 32, 254, 255, 256,
// 257, 510, 511 and the last) were stored before, each by its own batch (its own
// sidecar row, so that no other hit brings its row back): every one of
// them is a duplicate of its original, at the original's offset, and the
// other keys are stored; a key repeated at the end of the batch is a
// duplicate of the same original.
func TestDedupBatchOfExactlyChunkSizes(t *testing.T) {
	for _, n := range []int{16, 17, 32, 256, 257, 512} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := setup(t)
			key := func(i int) string { return fmt.Sprintf("key-%d", i) }
			orig := map[int]pg.Outcome{}
			for _, p := range []int{0, 14, 15, 16, 17, 30, 31, 32, 254, 255, 256, 257, 510, 511, n - 1} {
				if _, ok := orig[p]; !ok && p < n {
					orig[p] = b.project(t, item("q", key(p), now()))[0]
				}
			}
			batch := make([]pg.ProjectItem, n, n+1)
			for i := range batch {
				batch[i] = item("q", key(i), now())
			}
			batch = append(batch, item("q", key(15), now()))
			out := b.project(t, batch...)
			seen := map[int64]bool{}
			for j, o := range out {
				i := j
				if j == n {
					i = 15
				}
				if first, ok := orig[i]; ok {
					wantDup(t, key(i), o, true, first.MessageID)
					if o.Offset != first.Offset {
						t.Fatalf("%s: duplicate names offset %d, original at %d", key(i), o.Offset, first.Offset)
					}
					continue
				}
				wantDup(t, key(i), o, false, uuid.Nil)
				if seen[o.Offset] {
					t.Fatalf("%s: offset %d stored twice", key(i), o.Offset)
				}
				seen[o.Offset] = true
			}
		})
	}
}

// TestStoreSegmentsChecks calls queen.store_segments as a predicted batch
// does, over two partitions of queue "plain" and one of queue "secret"
// (encrypted): with the right flags (a queue named twice included) it
// moves every partition and writes every segment; a wrong flag for the
// second queue only, a queue not there, or a partition not at the
// predicted offset raises QN001 and moves nothing, writes nothing; with
// no queues (the long way) the flags are not checked.
func TestStoreSegmentsChecks(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	ctx := context.Background()
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.a.Configure(ctx, "secret", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	x.projectA(t, at("plain", "P1", ""), at("plain", "P2", ""), at("secret", "P1", ""))
	var ids []uuid.UUID
	for _, qp := range [][2]string{{"plain", "P1"}, {"plain", "P2"}, {"secret", "P1"}} {
		var id uuid.UUID
		if err := x.a.Pool().QueryRow(ctx, `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			WHERE q.name = $1 AND p.name = $2`, qp[0], qp[1]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	body := pg.EncodeSegment(nil, []pg.Message{at("plain", "P1", "").Message})
	bodies := [][]byte{body, body, body}
	nexts := func() []int64 {
		t.Helper()
		var n []int64
		for _, id := range ids {
			var v int64
			if err := x.a.Pool().QueryRow(ctx, `SELECT next_offset FROM queen.partitions WHERE id = $1`, id).Scan(&v); err != nil {
				t.Fatal(err)
			}
			n = append(n, v)
		}
		return n
	}
	call := func(bases []int64, queues []string, enc []bool) error {
		_, err := x.a.Pool().Exec(ctx, `SELECT queen.store_segments($1::uuid[], $2::bigint[], $3::integer[], $4::text[], $5::boolean[], $6::bytea[])`,
			ids, bases, []int32{1, 1, 1}, queues, enc, bodies)
		return err
	}
	wantRefused := func(what string, err error, before []int64, segs int) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "QN001" {
			t.Fatalf("%s: %v, want SQLSTATE QN001", what, err)
		}
		if got := nexts(); !slices.Equal(got, before) {
			t.Fatalf("%s: next offsets %v after the refusal, want %v", what, got, before)
		}
		if n := segmentsOf(t, x.a, ids); n != segs {
			t.Fatalf("%s: %d segments after the refusal, want %d", what, n, segs)
		}
	}

	at1 := nexts()
	if !slices.Equal(at1, []int64{1, 1, 1}) {
		t.Fatalf("next offsets %v, want [1 1 1]", at1)
	}
	wantRefused("secret predicted plaintext", call(at1, []string{"plain", "secret"}, []bool{false, false}), at1, 3)
	wantRefused("plain predicted encrypted", call(at1, []string{"secret", "plain"}, []bool{true, true}), at1, 3)
	wantRefused("a queue not there", call(at1, []string{"plain", "secret", "gone"}, []bool{false, true, false}), at1, 3)
	wantRefused("one partition moved", call([]int64{1, 0, 1}, []string{"plain", "secret"}, []bool{false, true}), at1, 3)
	if err := call(at1, []string{"plain", "secret", "plain"}, []bool{false, true, false}); err != nil {
		t.Fatal(err)
	}
	if got := nexts(); !slices.Equal(got, []int64{2, 2, 2}) {
		t.Fatalf("next offsets %v, want [2 2 2]", got)
	}
	if err := call([]int64{2, 2, 2}, nil, nil); err != nil {
		t.Fatalf("no flags to check: %v", err)
	}
	if n := segmentsOf(t, x.a, ids); n != 9 {
		t.Fatalf("%d segments, want 9", n)
	}
	// The projector carries on from there (the long way once: its guesses
	// are behind), every message at the next offset.
	out := x.projectA(t, at("plain", "P1", ""), at("secret", "P1", ""))
	if out[0].Offset != 3 || out[1].Offset != 3 {
		t.Fatalf("offsets %d, %d after the direct writes, want 3, 3", out[0].Offset, out[1].Offset)
	}
}

// TestDedupProbeManyHits: a probe of 3,000 keys, each hitting its own
// sidecar row, plus one row hit by keys of every piece, returns each of
// the 3,001 rows once (the probe collects the rows its pieces hit, then
// reads each once).
func TestDedupProbeManyHits(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const n = 3000
	hashes := make([]int64, n)
	for i := range hashes {
		hashes[i] = int64(i)*15485863 + 5
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO queen.dedup_batches (expires_at, partition_ids, base_offsets, key_hashes)
		SELECT now() + interval '1 hour', ARRAY[$1::uuid], ARRAY[o - 1], ARRAY[h] FROM unnest($2::bigint[]) WITH ORDINALITY AS u(h, o)`,
		uuid.New(), hashes); err != nil {
		t.Fatal(err)
	}
	insertSidecarRow(t, s, uuid.New(), -1, []int64{hashes[0], hashes[1000], hashes[2999]})
	got := probeBases(t, s, hashes)
	if len(got) != n+1 {
		t.Fatalf("%d rows, want %d", len(got), n+1)
	}
	for i, b := range got {
		if b != int64(i-1) {
			t.Fatalf("row %d has base %d, want %d (each row once)", i, b, i-1)
		}
	}
}
