package pg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// brokers is two Stores on one database (two brokers), each with its own
// checkpoint row and WAL index.
type brokers struct {
	a, b     *pg.Store
	idA, idB uuid.UUID
	walA     uint64
	walB     uint64
}

func setupBrokers(t *testing.T, key *crypt.Key) *brokers {
	t.Helper()
	url := testenv.NewDatabase(t)
	a := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger, EncryptionKey: key})
	b := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger, EncryptionKey: key})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return &brokers{a: a, b: b, idA: uuid.New(), idB: uuid.New()}
}

// projectA and projectB project items as broker A or B.
func (x *brokers) projectA(t *testing.T, items ...pg.ProjectItem) []pg.Outcome {
	t.Helper()
	x.walA++
	return mustProject(t, x.a, x.idA, x.walA, items)
}

func (x *brokers) projectB(t *testing.T, items ...pg.ProjectItem) []pg.Outcome {
	t.Helper()
	x.walB++
	return mustProject(t, x.b, x.idB, x.walB, items)
}

func mustProject(t *testing.T, s *pg.Store, broker uuid.UUID, wal uint64, items []pg.ProjectItem) []pg.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Project(ctx, broker, pg.Checkpoint{Index: wal, HasCRC: true}, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(items) {
		t.Fatalf("%d outcomes for %d items", len(out), len(items))
	}
	cp, ok, err := s.Checkpoint(ctx, broker)
	if err != nil || !ok || cp.Index != wal {
		t.Fatalf("checkpoint %+v (found %v, %v), want index %d", cp, ok, err, wal)
	}
	return out
}

// at is an item of queue q, partition p: txid "" is a broker-minted id.
func at(q, p, txid string) pg.ProjectItem {
	it := item(q, txid, now())
	it.Partition = p
	return it
}

// storedMsg is a message read back from its segment.
type storedMsg struct {
	partition string
	offset    int64
	msg       pg.Message
}

// stored reads every segment of queue q, checks that each partition's
// segments cover offsets 0.. without gap or overlap up to its next_offset,
// and returns the messages by partition in offset order.
func stored(t *testing.T, s *pg.Store, q string) map[string][]storedMsg {
	t.Helper()
	ctx := context.Background()
	rows, err := s.Pool().Query(ctx, `SELECT p.name, p.next_offset, sg.base_offset, sg.last_offset, sg.body
		FROM queen.partitions p JOIN queen.queues qu ON qu.id = p.queue_id
		JOIN queen.segments sg ON sg.partition_id = p.id
		WHERE qu.name = $1 ORDER BY p.name, sg.base_offset`, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := make(map[string][]storedMsg)
	nexts := make(map[string]int64)
	for rows.Next() {
		var part string
		var next, base, last int64
		var body []byte
		if err := rows.Scan(&part, &next, &base, &last, &body); err != nil {
			t.Fatal(err)
		}
		msgs, err := pg.DecodeSegment(body)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(len(out[part])); base != want || last != base+int64(len(msgs))-1 {
			t.Fatalf("partition %s: segment %d..%d of %d messages after offset %d", part, base, last, len(msgs), want-1)
		}
		for i, m := range msgs {
			out[part] = append(out[part], storedMsg{part, base + int64(i), m})
		}
		nexts[part] = next
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for part, n := range nexts {
		if int64(len(out[part])) != n {
			t.Fatalf("partition %s: next_offset %d, %d messages stored", part, n, len(out[part]))
		}
	}
	return out
}

// wantStored checks that items (with their outcomes) are stored at their
// outcome's offsets as themselves.
func wantStored(t *testing.T, got map[string][]storedMsg, items []pg.ProjectItem, out []pg.Outcome) {
	t.Helper()
	for i, it := range items {
		if out[i].Duplicate {
			continue
		}
		msgs := got[it.Partition]
		if out[i].Offset >= int64(len(msgs)) {
			t.Fatalf("item %d (%s): offset %d, partition holds %d", i, it.Message.TransactionID, out[i].Offset, len(msgs))
		}
		m := msgs[out[i].Offset].msg
		if m.ID != it.Message.ID || m.TransactionID != it.Message.TransactionID || out[i].MessageID != it.Message.ID {
			t.Fatalf("item %d (%s): offset %d holds %s/%s, outcome %+v", i, it.Message.TransactionID, out[i].Offset,
				m.ID, m.TransactionID, out[i])
		}
	}
}

func wantPredicted(t *testing.T, s *pg.Store, committed, missed int64) {
	t.Helper()
	if c, m := pg.PredictedBatches(s); c != committed || m != missed {
		t.Fatalf("one-round-trip batches: %d committed, %d rolled back; want %d, %d", c, m, committed, missed)
	}
}

// TestProjectPredictedMinted: a minted-only batch to partitions the Store
// committed to last, or looked up (created) for this very batch, is
// written in one round trip, at the offsets the long way would give
// (consecutive in WAL order, per partition).
func TestProjectPredictedMinted(t *testing.T) {
	x := setupBrokers(t, nil)
	batch := func(parts ...string) []pg.ProjectItem {
		var items []pg.ProjectItem
		for _, p := range parts {
			items = append(items, at("m", p, ""))
		}
		return items
	}
	var all []pg.ProjectItem
	var outs []pg.Outcome
	step := func(items []pg.ProjectItem, committed int64) {
		t.Helper()
		out := x.projectA(t, items...)
		wantPredicted(t, x.a, committed, 0)
		all, outs = append(all, items...), append(outs, out...)
	}
	step(batch("P0", "P1", "P0"), 1)             // P0, P1 created: predicted from the lookup
	step(batch("P1", "P0", "P0", "P1", "P1"), 2) // predicted from the commit
	step(batch("P0", "P2"), 3)                   // P2 new: predicted from the lookup
	step(batch("P2", "P2", "P0", "P1"), 4)       // predicted
	got := stored(t, x.a, "m")
	wantStored(t, got, all, outs)
	for p, n := range map[string]int{"P0": 6, "P1": 5, "P2": 3} {
		if len(got[p]) != n {
			t.Errorf("partition %s holds %d messages, want %d", p, len(got[p]), n)
		}
	}
}

// TestProjectPredictedStale: another broker writing the same partition
// makes A's prediction stale: A's one-round-trip batch rolls back before
// anything is written and is projected the long way, at the next free
// offsets; for guessHold A predicts no more for that partition.
func TestProjectPredictedStale(t *testing.T) {
	x := setupBrokers(t, nil)
	var all []pg.ProjectItem
	var outs []pg.Outcome
	add := func(items []pg.ProjectItem, out []pg.Outcome) {
		all, outs = append(all, items...), append(outs, out...)
	}
	items := []pg.ProjectItem{at("s", "P", ""), at("s", "P", "")}
	add(items, x.projectA(t, items...))
	items = []pg.ProjectItem{at("s", "P", ""), at("s", "P", ""), at("s", "P", "")}
	add(items, x.projectB(t, items...))
	items = []pg.ProjectItem{at("s", "P", ""), at("s", "P", "")}
	add(items, x.projectA(t, items...)) // predicted offset 2 for P, but B moved it to 5
	wantPredicted(t, x.a, 1, 1)
	if outs[5].Offset != 5 {
		t.Fatalf("A's second batch stored at offset %d, want 5", outs[5].Offset)
	}
	items = []pg.ProjectItem{at("s", "P", "")}
	add(items, x.projectA(t, items...)) // held: the long way without trying
	wantPredicted(t, x.a, 1, 1)
	if outs[7].Offset != 7 {
		t.Fatalf("A's third batch stored at offset %d, want 7", outs[7].Offset)
	}
	wantStored(t, stored(t, x.a, "s"), all, outs)
}

// TestProjectPredictedClientKeys: a batch mixing minted ids and new client
// transactionIds is written in one round trip; one that repeats a stored
// client transactionId rolls back and is decided the long way (the repeat
// a duplicate of the original, first-wins, the rest stored at consecutive
// offsets).
func TestProjectPredictedClientKeys(t *testing.T) {
	x := setupBrokers(t, nil)
	first := []pg.ProjectItem{at("c", "P", "k1"), at("c", "P", ""), at("c", "R", "k2")}
	out1 := x.projectA(t, first...)
	second := []pg.ProjectItem{at("c", "R", ""), at("c", "P", "k3"), at("c", "P", "")}
	out2 := x.projectA(t, second...)
	wantPredicted(t, x.a, 2, 0)
	third := []pg.ProjectItem{at("c", "P", ""), at("c", "P", "k1"), at("c", "R", "k4")}
	out3 := x.projectA(t, third...)
	wantPredicted(t, x.a, 2, 1)
	wantDup(t, "k1 again", out3[1], true, first[0].Message.ID)
	if out3[1].Offset != out1[0].Offset {
		t.Fatalf("duplicate names offset %d, original at %d", out3[1].Offset, out1[0].Offset)
	}
	if out3[0].Offset != 4 || out3[2].Offset != 2 {
		t.Fatalf("third batch stored at P %d, R %d; want 4, 2", out3[0].Offset, out3[2].Offset)
	}
	all := append(append(append([]pg.ProjectItem{}, first...), second...), third...)
	outs := append(append(append([]pg.Outcome{}, out1...), out2...), out3...)
	wantStored(t, stored(t, x.a, "c"), all, outs)

	// A client transactionId in the minted form (another message's id
	// text) needs the minted probe: the long way.
	x.projectA(t, at("c", "P", second[0].Message.ID.String()))
	wantPredicted(t, x.a, 2, 1)
}

// TestProjectPredictedQueueDeleted: a queue deleted by another broker
// between two of A's batches: A's one-round-trip batch finds its
// partition gone, rolls back, and the long way recreates the queue (as a
// push to a missing queue does) and stores the batch from offset 0.
func TestProjectPredictedQueueDeleted(t *testing.T) {
	x := setupBrokers(t, nil)
	x.projectA(t, at("d", "P", ""), at("d", "P", ""))
	if ok, err := x.b.DeleteQueue(context.Background(), "d"); err != nil || !ok {
		t.Fatalf("delete queue: %v, %v", ok, err)
	}
	items := []pg.ProjectItem{at("d", "P", ""), at("d", "P", "")}
	out := x.projectA(t, items...)
	wantPredicted(t, x.a, 1, 1)
	if out[0].Offset != 0 || out[1].Offset != 1 {
		t.Fatalf("after the delete stored at %d, %d; want 0, 1", out[0].Offset, out[1].Offset)
	}
	wantStored(t, stored(t, x.a, "d"), items, out)
}

// TestProjectPredictedEncryptionChanged: encryptionEnabled turned on by
// another broker between two of A's batches: the prediction (plaintext)
// is refused under the lock, and the batch is stored encrypted.
func TestProjectPredictedEncryptionChanged(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	x.projectA(t, at("e", "P", ""))
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.b.Configure(context.Background(), "e", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	items := []pg.ProjectItem{at("e", "P", ""), at("e", "P", "")}
	out := x.projectA(t, items...)
	wantPredicted(t, x.a, 1, 1)
	got := stored(t, x.a, "e")["P"]
	if len(got) != 3 || got[0].msg.Encrypted || !got[1].msg.Encrypted || !got[2].msg.Encrypted {
		t.Fatalf("stored %d messages, encrypted %v; want 3: plaintext, then encrypted", len(got), encryptedFlags(got))
	}
	if out[0].Offset != 1 || out[1].Offset != 2 {
		t.Fatalf("stored at %d, %d; want 1, 2", out[0].Offset, out[1].Offset)
	}
}

func encryptedFlags(ms []storedMsg) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%v ", m.msg.Encrypted)
	}
	return b.String()
}

// TestProjectPredictedConcurrentBrokers: two brokers projecting minted and
// client-keyed batches to the same partitions at once (predictions going
// stale all the time, partitions locked in id order) store every item
// once, at consecutive offsets, without an error.
func TestProjectPredictedConcurrentBrokers(t *testing.T) {
	x := setupBrokers(t, nil)
	const rounds = 40
	type result struct {
		items []pg.ProjectItem
		out   []pg.Outcome
		err   error
	}
	run := func(s *pg.Store, broker uuid.UUID, name string, done chan<- result) {
		var r result
		for i := 1; i <= rounds && r.err == nil; i++ {
			var items []pg.ProjectItem
			for j := 0; j < 1+i%5; j++ {
				txid := ""
				if j%3 == 1 {
					txid = fmt.Sprintf("%s-%d-%d", name, i, j)
				}
				items = append(items, at("cc", fmt.Sprintf("P%d", (i+j)%4), txid))
			}
			out, err := s.Project(context.Background(), broker, pg.Checkpoint{Index: uint64(i), HasCRC: true}, items)
			r.items, r.out, r.err = append(r.items, items...), append(r.out, out...), err
		}
		done <- r
	}
	done := make(chan result, 2)
	go run(x.a, x.idA, "a", done)
	go run(x.b, x.idB, "b", done)
	var all []pg.ProjectItem
	var outs []pg.Outcome
	for i := 0; i < 2; i++ {
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		all, outs = append(all, r.items...), append(outs, r.out...)
	}
	got := stored(t, x.a, "cc")
	wantStored(t, got, all, outs)
	n := 0
	for _, ms := range got {
		n += len(ms)
	}
	if n != len(all) {
		t.Fatalf("%d messages stored, %d projected", n, len(all))
	}
	for _, s := range []*pg.Store{x.a, x.b} {
		c, m := pg.PredictedBatches(s)
		t.Logf("one round trip: %d committed, %d rolled back", c, m)
	}
}

// TestProjectSidecarExpiryBothWays: the sidecar row of a batch expires at
// its newest acceptance time plus its queue's dedup window as the window
// is when the batch commits, on the long way and on the one-round-trip
// way alike (the latter sends its insert before it has read the window).
func TestProjectSidecarExpiryBothWays(t *testing.T) {
	x := setupBrokers(t, nil)
	ctx := context.Background()
	expiry := func() time.Time {
		t.Helper()
		var e time.Time
		if err := x.a.Pool().QueryRow(ctx, `SELECT max(expires_at) FROM queen.dedup_batches`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	first := at("w", "P0", "k1")
	x.projectA(t, first, first) // k1 repeated in its batch: the long way
	wantPredicted(t, x.a, 0, 0)
	if got, want := expiry(), time.UnixMicro(first.AcceptedAtMicros).Add(time.Hour); !got.Equal(want) {
		t.Fatalf("long way: expires %v, want %v (default window 1 h)", got, want)
	}
	if _, err := x.a.Pool().Exec(ctx, `UPDATE queen.queues SET dedup_window_seconds = 7200 WHERE name = 'w'`); err != nil {
		t.Fatal(err)
	}
	second := at("w", "P0", "k2")
	x.projectA(t, second, at("w", "P0", "")) // predicted
	wantPredicted(t, x.a, 1, 0)
	if got, want := expiry(), time.UnixMicro(second.AcceptedAtMicros).Add(2*time.Hour); got.Before(want) {
		t.Fatalf("one round trip: expires %v, want at least %v (window 2 h)", got, want)
	}
}
