package pg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/pg"
)

// TestProjectPredictedFirstSeen: a batch naming a partition this Store has
// never committed to (another broker created it, wrote to it and turned
// its queue's encryption on) goes the one-round-trip way, predicted from
// the partition lookup: stored encrypted, at the offsets after the other
// broker's, and the next batch is predicted from the commit.
func TestProjectPredictedFirstSeen(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.b.Configure(context.Background(), "n", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	all := []pg.ProjectItem{at("n", "P", ""), at("n", "P", "k1"), at("n", "P", "")}
	outs := x.projectB(t, all...)
	items := []pg.ProjectItem{at("n", "P", ""), at("n", "Q", "k2"), at("n", "P", "k3")}
	out := x.projectA(t, items...)
	wantPredicted(t, x.a, 1, 0)
	if out[0].Offset != 3 || out[1].Offset != 0 || out[2].Offset != 4 {
		t.Fatalf("first batch of A stored at P %d, Q %d, P %d; want 3, 0, 4", out[0].Offset, out[1].Offset, out[2].Offset)
	}
	all, outs = append(all, items...), append(outs, out...)
	items = []pg.ProjectItem{at("n", "Q", ""), at("n", "P", "")}
	out = x.projectA(t, items...)
	wantPredicted(t, x.a, 2, 0)
	if out[0].Offset != 1 || out[1].Offset != 5 {
		t.Fatalf("second batch of A stored at Q %d, P %d; want 1, 5", out[0].Offset, out[1].Offset)
	}
	all, outs = append(all, items...), append(outs, out...)
	got := stored(t, x.a, "n")
	wantStored(t, got, all, outs)
	for p, ms := range got {
		for _, m := range ms {
			if !m.msg.Encrypted {
				t.Fatalf("partition %s offset %d stored in plaintext", p, m.offset)
			}
		}
	}
}

// TestProjectPredictedMovedSinceLookup: a partition looked up by A (its
// offset and encryption learned from the lookup) that another broker
// writes to, or whose queue's encryption it turns on, before A's batch:
// the prediction is refused under the lock, the batch rolls back and is
// stored the long way at the next free offsets (encrypted where the queue
// now says so).
func TestProjectPredictedMovedSinceLookup(t *testing.T) {
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	x := setupBrokers(t, key)
	ctx := context.Background()
	items := []pg.ProjectItem{at("v", "P", ""), at("v", "E", "")}
	if _, err := pg.LookUpPartitions(ctx, x.a, items); err != nil {
		t.Fatal(err)
	}
	all := []pg.ProjectItem{at("v", "P", ""), at("v", "P", "k1")}
	outs := x.projectB(t, all...) // P moves to 2 after A's lookup
	pItems := []pg.ProjectItem{at("v", "P", ""), at("v", "P", "k2")}
	out := x.projectA(t, pItems...)
	wantPredicted(t, x.a, 0, 1)
	if out[0].Offset != 2 || out[1].Offset != 3 {
		t.Fatalf("A stored at %d, %d; want 2, 3", out[0].Offset, out[1].Offset)
	}

	// E: looked up while plaintext; encryption turned on since.
	o := pg.DefaultQueueOptions()
	o.EncryptionEnabled = true
	if _, err := x.b.Configure(ctx, "v", "", "", "", o); err != nil {
		t.Fatal(err)
	}
	e := []pg.ProjectItem{at("v", "E", ""), at("v", "E", "")}
	eout := x.projectA(t, e...)
	wantPredicted(t, x.a, 0, 2)
	if eout[0].Offset != 0 || eout[1].Offset != 1 {
		t.Fatalf("A stored E at %d, %d; want 0, 1", eout[0].Offset, eout[1].Offset)
	}
	got := stored(t, x.a, "v")
	for _, m := range got["E"] {
		if !m.msg.Encrypted {
			t.Fatalf("E offset %d stored in plaintext after encryption was turned on", m.offset)
		}
	}
	all = append(append(all, pItems...), e...)
	outs = append(append(outs, out...), eout...)
	wantStored(t, got, all, outs)
}

// TestProjectTransactionLeavesNoGuess: a transactional push to a new
// partition does not learn the lookup's offset (it moves the partition
// itself), so the projector's next batch there takes the long way at once
// instead of a one-round-trip attempt that would roll back.
func TestProjectTransactionLeavesNoGuess(t *testing.T) {
	x := setupBrokers(t, nil)
	tx, err := x.a.Transaction(context.Background(), []pg.ProjectItem{at("t", "P", "k1"), at("t", "P", "")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Pushes[1].Offset != 1 {
		t.Fatalf("transactional push stored at %d, want 1", tx.Pushes[1].Offset)
	}
	out := x.projectA(t, at("t", "P", ""))
	wantPredicted(t, x.a, 0, 0)
	if out[0].Offset != 2 {
		t.Fatalf("projected at %d, want 2", out[0].Offset)
	}
}
