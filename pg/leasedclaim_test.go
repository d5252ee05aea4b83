package pg_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// subscribeAll gives each group a clean cursor at offset 0 on every
// partition of queue: a leased pop of each partition by name (the general
// path creates the cursor), its lease given back (no delivery counted).
func subscribeAll(t *testing.T, ctx context.Context, st *pg.Store, queue string, parts, groups []string) {
	t.Helper()
	for _, g := range groups {
		for _, p := range parts {
			res, err := st.Pop(ctx, pg.PopRequest{Queue: queue, Partition: p, Group: g, Batch: 1})
			if err != nil || len(res.Messages) != 1 {
				t.Fatalf("pop %s/%s: %v", g, p, err)
			}
			if _, err := st.ReleaseLease(ctx, res.LeaseID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCombinedLeasedPopsOneClaim: concurrent leased pops of several
// consumer groups (some of one group) served together are claimed by ONE
// statement; each pop gets a lease of its own and one partition's
// contiguous run from its group's cursor, two pops of one group never the
// same partition, a pop of a group that needs the general path (not yet
// subscribed) is left to run by itself, and a pop with no partition left
// for it too. The next combined round continues exactly where the acks
// left each cursor.
func TestCombinedLeasedPopsOneClaim(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	parts := []string{"a", "b", "c", "d"}
	for _, p := range parts {
		store(t, ctx, st, "q", p, 10)
	}
	groups := []string{"G1", "G2", "G3", "G4", "G5"}
	subscribeAll(t, ctx, st, "q", parts, groups)
	const batch = 3
	var reqs []pg.PopRequest
	for _, g := range []string{"G1", "G2", "G3", "G1", "G4", "Gnew", "G5", "G1", "G2", "G2", "G2", "G2"} {
		reqs = append(reqs, pg.PopRequest{Queue: "q", Group: g, Batch: batch})
	}
	next := map[string]int64{} // group/partition: the group's cursor there
	for round := range 2 {
		before := pg.LeasedClaims(st)
		res, errs := pg.PopLeasedTogether(ctx, st, reqs)
		if n := pg.LeasedClaims(st) - before; n != 1 {
			t.Fatalf("round %d: %d claim statements for %d pops, want 1", round, n, len(reqs))
		}
		leases := map[uuid.UUID]bool{}
		taken := map[string]map[string]bool{}
		served := map[string]int{}
		var acks []pg.AckRequest
		for i, r := range res {
			g := reqs[i].Group
			if errs[i] != nil {
				t.Fatalf("round %d: pop %d (%s): %v", round, i, g, errs[i])
			}
			if r == nil {
				continue
			}
			served[g]++
			if leases[r.LeaseID] || r.LeaseID == uuid.Nil {
				t.Fatalf("round %d: pop %d: lease %s not its own", round, i, r.LeaseID)
			}
			leases[r.LeaseID] = true
			if len(r.Claimed) != 1 || len(r.Messages) != batch {
				t.Fatalf("round %d: pop %d (%s): %d messages of %v, want %d of one partition", round, i, g, len(r.Messages), r.Claimed, batch)
			}
			p := r.Claimed[0].Name
			if taken[g] == nil {
				taken[g] = map[string]bool{}
			}
			if taken[g][p] {
				t.Fatalf("round %d: group %s got partition %s twice", round, g, p)
			}
			taken[g][p] = true
			for j, m := range r.Messages {
				if m.Partition != p || m.LeaseID != r.LeaseID || m.Offset != next[g+"/"+p]+int64(j) {
					t.Fatalf("round %d: pop %d (%s): message %d is %s@%d under %s", round, i, g, j, m.Partition, m.Offset, m.LeaseID)
				}
				l := r.LeaseID
				acks = append(acks, pg.AckRequest{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
					LeaseID: &l, Status: pg.AckCompleted, Group: g})
			}
			var lease uuid.UUID
			var end int64
			if err := st.Pool().QueryRow(ctx, `SELECT c.lease_id, c.lease_end FROM queen.consumer_cursors c
				JOIN queen.partitions p ON p.id = c.partition_id WHERE p.name = $1 AND c.consumer_group = $2`, p, g).Scan(&lease, &end); err != nil {
				t.Fatal(err)
			}
			if lease != r.LeaseID || end != next[g+"/"+p]+batch-1 {
				t.Fatalf("round %d: cursor %s/%s under %s to %d, want %s to %d", round, g, p, lease, end, r.LeaseID, next[g+"/"+p]+batch-1)
			}
			next[g+"/"+p] += batch
		}
		want := map[string]int{"G1": 3, "G2": 4, "G3": 1, "G4": 1, "G5": 1}
		for g, n := range want {
			if served[g] != n {
				t.Fatalf("round %d: group %s served %d pops, want %d (served: %v)", round, g, served[g], n, served)
			}
		}
		if served["Gnew"] != 0 {
			t.Fatalf("round %d: a group not yet subscribed was served by the combined claim", round)
		}
		out, err := st.Ack(ctx, acks)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out {
			if !r.Success {
				t.Fatalf("round %d: ack: %s", round, r.Error)
			}
		}
	}
	var fresh int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.consumer_cursors WHERE consumer_group = 'Gnew'`).Scan(&fresh); err != nil || fresh != 0 {
		t.Fatalf("the combined claim created %d cursors of a new group (%v)", fresh, err)
	}
}
