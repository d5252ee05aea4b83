package pg_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// TestProjectPredictedFirstWins: with every partition's offsets predicted
// (the one-round-trip path in reach), dedup stays exact: a client
// transactionId repeated inside one batch, a client transactionId that is
// the text of a minted id of the same or an earlier batch, and a stored
// client transactionId repeated in a later batch are duplicates of their
// first occurrence; the uppercase spelling of a minted id, a lowercase
// UUIDv4 and the same transactionId in another partition are keys of
// their own. Minted and client items share partitions throughout, and
// the offsets stay consecutive.
func TestProjectPredictedFirstWins(t *testing.T) {
	x := setupBrokers(t, nil)
	var all []pg.ProjectItem
	var outs []pg.Outcome
	project := func(items ...pg.ProjectItem) []pg.Outcome {
		t.Helper()
		out := x.projectA(t, items...)
		all, outs = append(all, items...), append(outs, out...)
		return out
	}
	project(at("f", "P", ""), at("f", "Q", "")) // P and Q created: predicted from the lookup
	wantPredicted(t, x.a, 1, 0)

	// A new client key repeated in one batch: the long way decides it
	// without a rollback; first wins.
	k1, m1, kq := at("f", "P", "k1"), at("f", "P", ""), at("f", "Q", "k1")
	out := project(k1, m1, at("f", "P", "k1"), kq)
	wantPredicted(t, x.a, 1, 0)
	wantDup(t, "k1 first", out[0], false, uuid.Nil)
	wantDup(t, "minted", out[1], false, uuid.Nil)
	wantDup(t, "k1 again in its batch", out[2], true, k1.Message.ID)
	wantDup(t, "k1 in Q", out[3], false, uuid.Nil)

	// A minted id's text as another item's transactionId in the same
	// batch: a duplicate of the minted item; its uppercase spelling and a
	// UUIDv4 are new.
	m2 := at("f", "P", "")
	upper, v4 := at("f", "P", strings.ToUpper(m2.Message.ID.String())), at("f", "P", uuid.New().String())
	out = project(m2, at("f", "P", m2.Message.ID.String()), upper, v4)
	wantDup(t, "minted", out[0], false, uuid.Nil)
	wantDup(t, "its id as transactionId", out[1], true, m2.Message.ID)
	wantDup(t, "its id in uppercase", out[2], false, uuid.Nil)
	wantDup(t, "UUIDv4", out[3], false, uuid.Nil)

	// Predicted batches: new keys only (a UUIDv4 and an uppercase minted
	// id text are client keys probed by hash).
	c0, _ := pg.PredictedBatches(x.a)
	out = project(at("f", "P", ""), at("f", "P", "k2"), at("f", "Q", strings.ToUpper(m1.Message.ID.String())), at("f", "P", uuid.New().String()))
	for _, o := range out {
		wantDup(t, "new key", o, false, uuid.Nil)
	}
	if c1, missed := pg.PredictedBatches(x.a); c1 != c0+1 || missed != 0 {
		t.Fatalf("a batch of new keys: %d -> %d one-round-trip batches (%d rolled back), want one more", c0, c1, missed)
	}

	// Keys stored earlier, repeated in a batch whose offsets are
	// predicted: a stored client key (the pipeline rolls back: the long
	// way), a minted id of an earlier batch as a transactionId, and the
	// earlier UUIDv4 and uppercase text.
	out = project(at("f", "P", ""), at("f", "P", "k1"), at("f", "P", m1.Message.ID.String()), at("f", "P", v4.Message.TransactionID),
		at("f", "P", upper.Message.TransactionID), at("f", "P", "k1"))
	wantDup(t, "minted", out[0], false, uuid.Nil)
	wantDup(t, "k1 in a later batch", out[1], true, k1.Message.ID)
	wantDup(t, "earlier minted id as transactionId", out[2], true, m1.Message.ID)
	wantDup(t, "UUIDv4 again", out[3], true, v4.Message.ID)
	wantDup(t, "uppercase again", out[4], true, upper.Message.ID)
	wantDup(t, "k1 twice", out[5], true, k1.Message.ID)
	c0, m0 := pg.PredictedBatches(x.a)
	out = project(at("f", "P", "k1"), at("f", "Q", "k1"))
	wantDup(t, "k1 once more", out[0], true, k1.Message.ID)
	wantDup(t, "k1 once more in Q", out[1], true, kq.Message.ID)
	if c1, m1 := pg.PredictedBatches(x.a); c1 != c0 || m1 != m0+1 {
		t.Fatalf("stored keys repeated: %d/%d -> %d/%d one-round-trip batches committed/rolled back, want a rollback", c0, m0, c1, m1)
	}
	wantStored(t, stored(t, x.a, "f"), all, outs)
}
