package pg_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/pg"
)

// TestProjectThousandsOfPartitions: batches spanning thousands of
// partitions of two queues, minted ids and client transactionIds mixed,
// go the one-round-trip way (predicted from the lookup that created the
// partitions, then from the commits) and store every item at the offsets
// the long way gives, each partition's segments contiguous; a client key
// sent again is a duplicate of its original; a batch after another broker
// wrote some of the partitions goes the long way once and stores at the
// next free offsets; and a queue whose encryption another broker turned
// on rolls the next predicted batch back (one prediction missed, the
// other queue in the same batch unaffected) and is stored encrypted.
func TestProjectThousandsOfPartitions(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	const parts = 3000
	seq := 0
	batch := func(n int) []pg.ProjectItem {
		items := make([]pg.ProjectItem, n)
		for i := range items {
			seq++
			q := "tx"
			if seq%3 == 0 {
				q = "ty"
			}
			txid := ""
			if seq%2 == 0 {
				txid = fmt.Sprintf("k-%d", seq)
			}
			items[i] = at(q, fmt.Sprintf("p%d", seq%parts), txid)
		}
		return items
	}
	var all []pg.ProjectItem
	var outs []pg.Outcome
	keep := func(items []pg.ProjectItem, out []pg.Outcome) {
		all, outs = append(all, items...), append(outs, out...)
	}
	b1 := batch(4000) // creates every partition of both queues
	keep(b1, x.projectA(t, b1...))
	b2 := batch(4000)
	keep(b2, x.projectA(t, b2...))
	wantPredicted(t, x.a, 2, 0)

	// Client keys of the first batch, sent again: duplicates.
	var again []pg.ProjectItem
	var orig []pg.Outcome
	for i, it := range b1 {
		if !strings.HasPrefix(it.Message.TransactionID, "k-") || len(again) == 500 {
			continue
		}
		r := at(it.Queue, it.Partition, it.Message.TransactionID)
		again, orig = append(again, r), append(orig, outs[i])
	}
	out := x.projectA(t, again...)
	if len(again) != 500 {
		t.Fatalf("test bug: %d keys sent again", len(again))
	}
	for i, o := range out {
		wantDup(t, again[i].Message.TransactionID, o, true, orig[i].MessageID)
		if o.Offset != orig[i].Offset {
			t.Fatalf("duplicate %s names offset %d, original at %d", again[i].Message.TransactionID, o.Offset, orig[i].Offset)
		}
	}

	// Another broker writes to some of tx's partitions (pN is tx's for N
	// not a multiple of 3): A's next batch over them is refused under the
	// lock and stored the long way. (A rolled-back batch holds its
	// partitions from predictions for a second: wait that out first.)
	var bItems []pg.ProjectItem
	for k := 0; k < 50; k++ {
		bItems = append(bItems, at("tx", fmt.Sprintf("p%d", 3*k*7+1), ""))
	}
	keep(bItems, x.projectB(t, bItems...))
	time.Sleep(holdOut)
	c0, m0 := pg.PredictedBatches(x.a)
	b3 := batch(4000)
	keep(b3, x.projectA(t, b3...))
	if c, m := pg.PredictedBatches(x.a); m != m0+1 || c != c0 {
		t.Fatalf("after another broker's writes: %d/%d predicted batches committed/missed, want %d/%d", c, m, c0, m0+1)
	}

	// ty turns encrypted (broker B): A's next predicted batch over tx and
	// ty is refused once, ty's messages stored encrypted, tx's not.
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.b.Configure(context.Background(), "ty", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	time.Sleep(holdOut)
	b4 := batch(3000)
	c0, m0 = pg.PredictedBatches(x.a)
	out4 := x.projectA(t, b4...)
	keep(b4, out4)
	if c, m := pg.PredictedBatches(x.a); m != m0+1 || c != c0 {
		t.Fatalf("after ty's encryption was turned on: %d/%d predicted batches committed/missed, want %d/%d", c, m, c0, m0+1)
	}
	time.Sleep(holdOut)
	b5 := batch(3000) // the long way corrected the guesses: predicted again
	keep(b5, x.projectA(t, b5...))
	if c, m := pg.PredictedBatches(x.a); m != m0+1 || c != c0+1 {
		t.Fatalf("after the long way: %d/%d predicted batches committed/missed, want %d/%d", c, m, c0+1, m0+1)
	}

	gx, gy := stored(t, x.a, "tx"), stored(t, x.a, "ty")
	var ix, iy []pg.ProjectItem
	var ox, oy []pg.Outcome
	for i, it := range all {
		if it.Queue == "tx" {
			ix, ox = append(ix, it), append(ox, outs[i])
		} else {
			iy, oy = append(iy, it), append(oy, outs[i])
		}
	}
	wantStored(t, gx, ix, ox)
	wantStored(t, gy, iy, oy)
	if len(gx) != parts*2/3 || len(gy) != parts/3 {
		t.Fatalf("%d and %d partitions hold messages, want %d and %d", len(gx), len(gy), parts*2/3, parts/3)
	}
	n := 0
	for _, ms := range gx {
		n += len(ms)
		for _, m := range ms {
			if m.msg.Encrypted {
				t.Fatalf("tx partition %s offset %d stored encrypted", m.partition, m.offset)
			}
		}
	}
	for i, it := range b4 {
		if it.Queue != "ty" {
			continue
		}
		if m := gy[it.Partition][out4[i].Offset]; !m.msg.Encrypted {
			t.Fatalf("ty partition %s offset %d stored in plaintext after encryption was turned on", it.Partition, m.offset)
		}
	}
	for _, ms := range gy {
		n += len(ms)
	}
	if n != len(all) {
		t.Fatalf("%d messages stored, want %d", n, len(all))
	}
}

// holdOut is longer than the second a rolled-back prediction holds its
// partitions from predictions (pg.guessHold).
const holdOut = 1100 * time.Millisecond

// TestProjectPredictedEncryptionGuessesDisagree: two partitions of one
// queue whose guesses disagree on its encryption (one learned from A's
// commit while the queue was plaintext, one from a lookup after another
// broker turned encryption on) make the batch go the long way without a
// rolled-back round trip; it is stored encrypted, and the next batch is
// predicted again.
func TestProjectPredictedEncryptionGuessesDisagree(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	first := []pg.ProjectItem{at("g", "P1", "")}
	out1 := x.projectA(t, first...) // P1's guess: plaintext, from the commit
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.b.Configure(context.Background(), "g", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	// P2 is looked up (created) for this batch: its guess is encrypted.
	items := []pg.ProjectItem{at("g", "P1", ""), at("g", "P2", "k"), at("g", "P1", "")}
	out := x.projectA(t, items...)
	wantPredicted(t, x.a, 1, 0)
	next := []pg.ProjectItem{at("g", "P2", ""), at("g", "P1", "")}
	outN := x.projectA(t, next...)
	wantPredicted(t, x.a, 2, 0)
	got := stored(t, x.a, "g")
	wantStored(t, got, append(append(first, items...), next...), append(append(out1, out...), outN...))
	if f := got["P1"]; len(f) != 4 || f[0].msg.Encrypted || !f[1].msg.Encrypted || !f[2].msg.Encrypted || !f[3].msg.Encrypted {
		t.Fatalf("P1: %d messages, encrypted %v; want 4: plaintext, then encrypted", len(f), encryptedFlags(f))
	}
	if f := got["P2"]; len(f) != 2 || !f[0].msg.Encrypted || !f[1].msg.Encrypted {
		t.Fatalf("P2: %d messages, encrypted %v; want 2, encrypted", len(f), encryptedFlags(f))
	}
}

// TestDedupProbeInChunks: queen.dedup_batch_probe scans the sidecar's
// index in pieces of 16 hashes; a row whose hashes match in several
// pieces (and pieces past the first) comes back exactly once, a row
// matching nothing not at all, and an empty probe finds nothing.
func TestDedupProbeInChunks(t *testing.T) {
	s := openStore(t)
	hashes := make([]int64, 1000)
	for i := range hashes {
		hashes[i] = int64(i)*7919 + 1
	}
	pid := uuid.New()
	rows := [][]int64{
		{hashes[3], hashes[300], hashes[999], -5}, // pieces 1, 2 and 4
		{hashes[700]}, // piece 3 only
		{-1, -2, -3},  // none
	}
	for i, k := range rows {
		insertSidecarRow(t, s, pid, int64(i), k)
	}
	probe := func(h []int64) []int64 { return probeBases(t, s, h) }
	if got := probe(hashes); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("probe of 1,000 hashes found rows %v, want [0 1]", got)
	}
	if got := probe(hashes[256:512]); !slices.Equal(got, []int64{0}) {
		t.Fatalf("probe of hashes 256..511 found rows %v, want [0]", got)
	}
	if got := probe(nil); len(got) != 0 {
		t.Fatalf("empty probe found rows %v", got)
	}
}

// TestDedupManyKeysOneBatch: a batch of 1,000 client keys, then one that
// sends four of them again among 996 new ones (the probe's hits in
// different pieces of 16, all in one sidecar row): exactly those four
// are duplicates of their originals, the rest stored.
func TestDedupManyKeysOneBatch(t *testing.T) {
	b := setup(t)
	first := make([]pg.ProjectItem, 1000)
	for i := range first {
		first[i] = item("q", fmt.Sprintf("key-%d", i), now())
	}
	orig := b.project(t, first...)
	second := make([]pg.ProjectItem, 1000)
	again := map[int]int{10: 0, 300: 300, 650: 600, 999: 999} // index in second -> in first
	for i := range second {
		if j, ok := again[i]; ok {
			second[i] = item("q", fmt.Sprintf("key-%d", j), now())
		} else {
			second[i] = item("q", fmt.Sprintf("new-%d", i), now())
		}
	}
	out := b.project(t, second...)
	for i, o := range out {
		j, dup := again[i]
		if dup {
			wantDup(t, second[i].Message.TransactionID, o, true, orig[j].MessageID)
			continue
		}
		wantDup(t, second[i].Message.TransactionID, o, false, uuid.Nil)
	}
}
