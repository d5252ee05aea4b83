package pg

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestPredictedSidecarKeys: the one-round-trip path's sidecar row and
// assert_new_keys argument, built from the key hashes computed once per
// item, equal what dedupRuns.add and keyHash compute on their own, for a
// batch mixing client transactionIds and minted ids over partitions.
func TestPredictedSidecarKeys(t *testing.T) {
	items, ids := benchItems(60, 4, false)
	minted, _ := benchItems(60, 4, true)
	for i := range items {
		if i%3 == 0 {
			items[i].Message = minted[i].Message
		}
	}
	parts, lockIDs := predictedParts(ids, 7)
	s := &Store{}
	_, w, err := s.buildPredicted(items, ids, lockIDs, parts, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want dedupRuns
	addByPartition(&want, items, ids, lockIDs, 7)
	var wantNew []int64
	for i := range items {
		if !isMinted(items[i].Message.ID, items[i].Message.TransactionID) {
			wantNew = append(wantNew, keyHash(ids[i], items[i].Message.TransactionID))
		}
	}
	if !slices.Equal(w.runs.hashes, want.hashes) || !slices.Equal(w.runs.base, want.base) || !slices.Equal(w.runs.pid, want.pid) {
		t.Fatalf("sidecar row differs:\n got %v\nwant %v", w.runs.hashes, want.hashes)
	}
	if !slices.Equal(w.newKeys, wantNew) || len(wantNew) != 40 {
		t.Fatalf("new keys differ: got %d, want %d", len(w.newKeys), len(wantNew))
	}
}

// TestPredictedSidecarUUIDv7Keys: the sidecar row buildPredicted builds
// from what it learnt of each key (clientKey: hash and UUIDv7 time) is the
// row dedupRuns.add builds from the messages alone, for UUIDv7-text keys
// accepted within the skew of their time (kept under their tick), just
// outside it on either side (own hash and the tick's mark), and plain
// text keys, mixed in one batch without minted ids (which would send a
// batch with minted-form keys the long way).
func TestPredictedSidecarUUIDv7Keys(t *testing.T) {
	items, ids := benchItems(80, 4, false)
	now := time.Now().UnixMicro()
	for i := range items {
		m := &items[i].Message
		m.CreatedAtMicros, items[i].AcceptedAtMicros = now, now
		if i%4 == 3 {
			continue // plain text
		}
		u, _ := uuid.NewV7()
		ms := now/1000 + []int64{0, 1001, -1002}[i%4] // in the skew, after it, before it
		binary.BigEndian.PutUint16(u[0:2], uint16(ms>>32))
		binary.BigEndian.PutUint32(u[2:6], uint32(ms))
		m.TransactionID = u.String()
		if _, form := mintedForm(m.TransactionID); !form || mintedMillis(u) != ms {
			t.Fatalf("item %d: %s is not the minted form of %d", i, m.TransactionID, ms)
		}
	}
	parts, lockIDs := predictedParts(ids, 7)
	s := &Store{}
	_, w, err := s.buildPredicted(items, ids, lockIDs, parts, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := dedupRuns{crowded: s.ticks.crowded}
	addByPartition(&want, items, ids, lockIDs, 7)
	got := &w.runs
	if !slices.Equal(got.hashes, want.hashes) || !slices.Equal(got.ticks, want.ticks) || !slices.Equal(got.marked, want.marked) ||
		!slices.Equal(got.tickKeys, want.tickKeys) || !slices.Equal(got.pid, want.pid) || !slices.Equal(got.base, want.base) ||
		got.newest != want.newest || len(got.mintedAt) != 0 || len(want.mintedAt) != 0 {
		t.Fatalf("sidecar row differs:\n got %+v\nwant %+v", *got, want)
	}
	// 60 keys in the minted form, 20 within the skew: those go under their
	// ticks, the 40 outside it keep their own hash beside their ticks' marks.
	if len(got.tickKeys) != 20 || len(got.marked) == 0 {
		t.Fatalf("%d keys under ticks, %d marks: the batch does not cover both ways", len(got.tickKeys), len(got.marked))
	}
}

// predictedParts is what projectPredicted has before buildPredicted for
// a batch whose items are in the partitions ids: every partition's state
// with next (and base) as its predicted next offset, and the partitions
// once each in id order (lockIDs).
func predictedParts(ids []uuid.UUID, next int64) (map[uuid.UUID]*partState, []uuid.UUID) {
	parts := make(map[uuid.UUID]*partState)
	var lockIDs []uuid.UUID
	for _, id := range ids {
		if _, ok := parts[id]; !ok {
			parts[id] = &partState{id: id, next: next, base: next}
			lockIDs = append(lockIDs, id)
		}
	}
	sortIDs(lockIDs)
	return parts, lockIDs
}

// addByPartition adds to r, partition by partition in lockIDs' order,
// each partition's messages of items (ids[i] is item i's partition) as
// stored from offset base, with no keys computed beforehand: the row
// dedupRuns.add builds from the messages alone.
func addByPartition(r *dedupRuns, items []ProjectItem, ids, lockIDs []uuid.UUID, base int64) {
	for _, id := range lockIDs {
		var msgs []Message
		for i := range items {
			if ids[i] == id {
				msgs = append(msgs, items[i].Message)
			}
		}
		r.add(id, base, msgs, nil)
	}
}

// TestWbufReserveEncode: wbufReserve keeps the pending bytes, gives the
// room asked for, reuses the kept buffer and never keeps one beyond
// wbufKeepMax.
func TestWbufReserveEncode(t *testing.T) {
	kept := newKeptBuffer()
	pending := []byte("pending messages")
	r := &wbufReserve{need: 4096, kept: kept}
	got, err := r.Encode(slices.Clone(pending))
	if err != nil || string(got) != string(pending) || cap(got)-len(got) < 4096 {
		t.Fatalf("first: %q len %d cap %d, %v", got, len(got), cap(got), err)
	}
	if cap(kept.b) < len(pending)+4096 || &kept.b[:1][0] != &got[:1][0] {
		t.Fatalf("kept buffer cap %d is not the one handed out", cap(kept.b))
	}
	// Enough room already: dst itself.
	if again, _ := r.Encode(got); &again[:1][0] != &got[:1][0] {
		t.Fatal("a buffer with room was replaced")
	}
	// Another connection buffer, too small: copied into the kept one.
	other := []byte("xy")
	if again, _ := r.Encode(other); string(again) != "xy" || &again[:1][0] != &kept.b[:1][0] {
		t.Fatal("the kept buffer was not reused")
	}
	// Too large to keep: a buffer of its own, the kept one stays.
	big := &wbufReserve{need: wbufKeepMax + 1, kept: kept}
	before := cap(kept.b)
	if out, _ := big.Encode(nil); cap(out) < wbufKeepMax+1 || cap(kept.b) != before {
		t.Fatalf("big: cap %d, kept cap %d (was %d)", cap(out), cap(kept.b), before)
	}
}

// TestSegmentBodiesKeptBuffer: a connection's type map encodes segment
// bodies into the parameter buffer it keeps, batch after batch, with the
// parameters already in pgx's buffer in front unchanged.
func TestSegmentBodiesKeptBuffer(t *testing.T) {
	m := pgtype.NewMap()
	registerFastArrays(m)
	typ, _ := m.TypeForOID(pgtype.ByteaOID)
	kept := typ.Codec.(*fastByteaCodec).kept
	items, _ := benchItems(50, 1, false)
	msgs := make([]Message, len(items))
	for i := range items {
		msgs[i] = items[i].Message
	}
	want := EncodeSegment(nil, msgs)
	var first *byte
	for round := 0; round < 3; round++ {
		got, err := m.Encode(pgtype.ByteaOID, pgtype.BinaryFormatCode, segmentPack(want), []byte("params"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:6]) != "params" || !bytes.Equal(got[6:], want) {
			t.Fatalf("round %d: encoding differs", round)
		}
		if cap(kept.b) == 0 || &got[0] != &kept.b[:1][0] {
			t.Fatalf("round %d: not encoded into the kept buffer", round)
		}
		if round == 0 {
			first = &got[0]
		} else if &got[0] != first {
			t.Fatalf("round %d: the kept buffer was replaced", round)
		}
	}
}

// TestKeptBufferBudget: a buffer is kept only within keptBudget, and a
// kept buffer's growth is what is counted (a counter of the test's own, so
// that other kept buffers collected meanwhile do not move it).
func TestKeptBufferBudget(t *testing.T) {
	var total atomic.Int64
	k := &keptBuffer{held: new(atomic.Int64), total: &total}
	if !k.keep(make([]byte, 0, 1000)) || total.Load() != 1000 {
		t.Fatalf("first keep: total %d, want 1000", total.Load())
	}
	if !k.keep(make([]byte, 0, 3000)) || total.Load() != 3000 || k.held.Load() != 3000 {
		t.Fatalf("growth: total %d held %d, want 3000 and 3000", total.Load(), k.held.Load())
	}
	total.Store(keptBudget - 100)
	if k.keep(make([]byte, 0, 4000)) || cap(k.b) != 3000 || total.Load() != keptBudget-100 {
		t.Fatalf("past the budget: kept cap %d, total %d", cap(k.b), total.Load())
	}
	total.Store(3000)
	if k.keep(make([]byte, 0, wbufKeepMax+1)) {
		t.Fatal("a buffer over wbufKeepMax was kept")
	}
	// reserve still hands out the room asked for past the budget.
	total.Store(keptBudget)
	if out := reserve([]byte("ab"), 4000, k); string(out) != "ab" || cap(out)-len(out) < 4000 || cap(k.b) != 3000 {
		t.Fatalf("reserve past the budget: %q cap %d, kept cap %d", out, cap(out), cap(k.b))
	}
}

// TestPartsOfCutsBatchArray: a batch's messages go into the one array
// getBatchMsgs hands out (not an array per partition), each partition's
// part with no room past its own items (so a partition never writes into
// the next one's), the stored messages are the batch's in WAL order per
// partition whatever array they went into, and putBatchMsgs clears the
// array so that a kept one holds no payload.
func TestPartsOfCutsBatchArray(t *testing.T) {
	items, ids := benchItems(50, 7, false)
	build := func(back []Message) map[uuid.UUID]*partState {
		parts := make(map[uuid.UUID]*partState)
		for _, id := range ids {
			if parts[id] == nil {
				parts[id] = &partState{id: id}
			}
		}
		storeAll(items, ids, parts, nil, back)
		return parts
	}
	bp := getBatchMsgs(len(items))
	back := *bp
	lo, hi := &back[0], &back[len(back)-1]
	inBack := func(m *Message) bool {
		return uintptr(unsafe.Pointer(m)) >= uintptr(unsafe.Pointer(lo)) && uintptr(unsafe.Pointer(m)) <= uintptr(unsafe.Pointer(hi))
	}
	got, want := build(back), build(nil)
	total := 0
	for id, ps := range got {
		if len(ps.msgs) != ps.items || cap(ps.msgs) != ps.items {
			t.Fatalf("partition %s: %d messages, room for %d, want exactly its %d items", id, len(ps.msgs), cap(ps.msgs), ps.items)
		}
		if !inBack(&ps.msgs[0]) {
			t.Fatalf("partition %s: messages not in the batch's array", id)
		}
		w := want[id].msgs
		for i := range w {
			if ps.msgs[i].ID != w[i].ID || ps.msgs[i].TransactionID != w[i].TransactionID || &ps.msgs[i].Payload[0] != &w[i].Payload[0] {
				t.Fatalf("partition %s message %d differs from the one stored without the array", id, i)
			}
		}
		total += len(ps.msgs)
	}
	if total != len(items) {
		t.Fatalf("%d messages stored, want %d", total, len(items))
	}
	putBatchMsgs(bp)
	for i := range back {
		if back[i].Payload != nil || back[i].TransactionID != "" {
			t.Fatalf("message %d of a returned array still holds its payload", i)
		}
	}
	// An array too small for the batch is not used.
	for _, ps := range build(make([]Message, len(items)-1)) {
		if cap(ps.msgs) != ps.items {
			t.Fatalf("room for %d messages, want %d", cap(ps.msgs), ps.items)
		}
	}
}
