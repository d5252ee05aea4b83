package projector_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/binenc"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// encodeKind1 is a push record of the first layout (kind 1: every item
// spells out its partition and transactionId), as the first versions
// wrote it.
func encodeKind1(r *ingest.Record) []byte {
	dst := []byte{1}
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	dst = binenc.AppendUvarint(dst, uint64(len(r.Items)))
	for _, it := range r.Items {
		dst = append(dst, 0)
		dst = append(dst, it.MessageID[:]...)
		dst = binenc.AppendString(dst, it.Queue)
		dst = binenc.AppendString(dst, it.Partition)
		dst = binenc.AppendString(dst, it.TransactionID)
		dst = binenc.AppendBytes(dst, it.Payload)
	}
	return dst
}

// encodeBeforeMark is a kind 2 push record as versions before the minted
// mark (Item.MintedTxID) wrote it: the minted flag (bit 2) set where the
// transactionId is the message id's text, found by comparing the text; no
// producer sub in these records.
func encodeBeforeMark(r *ingest.Record) []byte {
	dst := []byte{2}
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	dst = binenc.AppendUvarint(dst, uint64(len(r.Items)))
	for _, it := range r.Items {
		var flags byte
		if it.Partition == ingest.DefaultPartition {
			flags |= 1 << 1
		}
		if binenc.IsUUIDText(it.MessageID, it.TransactionID) {
			flags |= 1 << 2
		}
		dst = append(dst, flags)
		dst = append(dst, it.MessageID[:]...)
		dst = binenc.AppendString(dst, it.Queue)
		if flags&(1<<1) == 0 {
			dst = binenc.AppendString(dst, it.Partition)
		}
		if flags&(1<<2) == 0 {
			dst = binenc.AppendString(dst, it.TransactionID)
		}
		dst = binenc.AppendBytes(dst, it.Payload)
	}
	return dst
}

// TestDedupOfMarkedItemsThroughTheWAL: items minted by the push path
// (ingest.NewItems, which marks a minted transactionId) go through the WAL
// and the projector into a real PostgreSQL, whole records
// (DecodeRecordInto into the projector's reused Record) and records in
// pieces (RecordReader into a reused Item), and after a restart inside a
// record (the checkpoint's partial items skipped); beside records of the
// kind 2 layout as written before the mark and of the kind 1 layout. A
// minted id is stored; a later item whose client transactionId is an
// earlier item's minted id (of any of the three layouts), or repeats a
// client transactionId, is a duplicate and not stored, also right after a
// minted item of the same record and where the reused Record or Item last
// held a minted item.
func TestDedupOfMarkedItemsThroughTheWAL(t *testing.T) {
	for _, c := range []struct {
		name     string
		maxItems int
		resume   int // items of record 2 committed before the projector starts
	}{{"whole records", 1000, 0}, {"in pieces", 2, 0}, {"resumed inside a record", 1000, 3}} {
		t.Run(c.name, func(t *testing.T) { testDedupOfMarkedItems(t, c.maxItems, c.resume) })
	}
}

func testDedupOfMarkedItems(t *testing.T, maxItems, resume int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := openWAL(t, wal.Options{NoSync: true})
	store := openStore(t, testenv.NewDatabase(t))

	const q, p = "mark", "P"
	n := 0
	parsed := func(txids ...string) []ingest.ParsedItem {
		out := make([]ingest.ParsedItem, len(txids))
		for i, tx := range txids {
			n++
			out[i] = ingest.ParsedItem{Queue: q, Partition: p, TransactionID: tx, Payload: []byte(fmt.Sprint(n))}
		}
		return out
	}
	mint := func(txids ...string) *ingest.Record {
		items, err := ingest.NewItems(parsed(txids...), nil)
		if err != nil {
			t.Fatal(err)
		}
		return &ingest.Record{AcceptedAt: time.Now().UnixMicro(), Items: items}
	}
	// A record of another layout: its minted items' transactionId is the id's
	// text, unmarked, as a decoder of that version left it.
	unmarked := func(txids ...string) *ingest.Record {
		r := mint(txids...)
		for i := range r.Items {
			r.Items[i].MintedTxID = false
		}
		return r
	}
	var stored []uuid.UUID // the ids that must be stored, in WAL order
	keep := func(r *ingest.Record, idx ...int) {
		for _, i := range idx {
			stored = append(stored, r.Items[i].MessageID)
		}
	}
	// Record 1, projected alone before the others are written: minted ids
	// around one client key.
	r1 := mint("", "c-1", "", "", "")
	keep(r1, 0, 1, 2, 3, 4)
	id := func(r *ingest.Record, i int) string { return r.Items[i].MessageID.String() }
	// Record 2: minted ids only, so that every item of the projector's
	// reused Record (and Item) that record 3 is decoded into held one.
	r2 := mint("", "", "", "", "", "", "", "")
	keep(r2, 0, 1, 2, 3, 4, 5, 6, 7)
	// Record 3: minted ids, each followed by a duplicate: record 1's minted
	// ids sent back as client transactionIds, its client key repeated.
	r3 := mint("", id(r1, 0), "", "c-1", "", id(r1, 2))
	keep(r3, 0, 2, 4)
	// Record 4, kind 2 as written before the mark: a minted id, then
	// duplicates of record 1's minted id and client key.
	r4 := unmarked("", id(r1, 3), "c-1")
	keep(r4, 0)
	// Record 5, kind 1: a minted id, a duplicate of record 4's, a new key.
	r5 := unmarked("", id(r4, 0), "c-2")
	keep(r5, 0, 2)
	// Record 6: duplicates of record 5's minted id and client key, of
	// record 3's minted id and of record 1's (after a minted item).
	r6 := mint(id(r5, 0), "c-2", id(r3, 4), "", id(r1, 4))
	keep(r6, 3)
	payloads := [][]byte{ingest.EncodeRecord(nil, r1), ingest.EncodeRecord(nil, r2), ingest.EncodeRecord(nil, r3),
		encodeBeforeMark(r4), encodeKind1(r5), ingest.EncodeRecord(nil, r6)}
	// The layout is the one versions before the mark wrote (the mark
	// changed how the flag is found, not what it says).
	if enc := ingest.EncodeRecord(nil, r4); string(enc) != string(payloads[3]) {
		t.Fatalf("record 4 encodes as %x today, %x before the mark", enc, payloads[3])
	}
	appendAll := func(payloads [][]byte) {
		for _, b := range payloads {
			if _, err := w.Append(b, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	broker := uuid.New()
	first := 1 // records written before the projector starts
	if resume > 0 {
		// A projector that committed records 1 and 2 and the first items
		// of record 3, then stopped (a crash): the checkpoint holds them.
		first = len(payloads)
		if err := store.EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
		var items []pg.ProjectItem
		for _, b := range payloads[:3] {
			rec, err := ingest.DecodeRecord(b)
			if err != nil {
				t.Fatal(err)
			}
			items = rec.AppendProjectItems(items)
		}
		items = items[:len(r1.Items)+len(r2.Items)+resume]
		cp := pg.Checkpoint{Index: 2, HasCRC: true, RecordCRC: wal.PayloadCRC(payloads[1]), PartialItems: resume,
			PartialCRC: wal.PayloadCRC(payloads[2])}
		if _, err := store.Project(ctx, broker, cp, items); err != nil {
			t.Fatal(err)
		}
	}
	appendAll(payloads[:first])
	pr := projector.New(projector.Config{BrokerID: broker, MaxBatchItems: maxItems, Logger: testenv.Logger},
		w, store, ingest.NewRegistry())
	if err := pr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pr.Stop()
	testenv.WaitFor(t, 30*time.Second, "the first records projected", func() bool { return pr.Checkpoint() == uint64(first) })
	appendAll(payloads[first:])
	testenv.WaitFor(t, 30*time.Second, "every record projected", func() bool { return pr.Checkpoint() == uint64(len(payloads)) })
	pr.Stop()
	msgs, err := store.ReadPartition(ctx, q, p)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = fmt.Sprintf("%s %s", m.ID, m.TransactionID)
	}
	want := make([]string, len(stored))
	for i, id := range stored {
		want[i] = id.String()
	}
	if len(msgs) != len(stored) {
		t.Fatalf("stored %d messages, want %d (a duplicate went unnoticed or an item was lost):\n got %q\nwant %q",
			len(msgs), len(stored), got, want)
	}
	for i, m := range msgs {
		if m.ID != stored[i] {
			t.Fatalf("offset %d holds %s, want %s:\n got %q\nwant %q", i, got[i], want[i], got, want)
		}
	}
}
