package pg_test

import (
	"testing"

	"github.com/queenmq/queen-go/pg"
)

// TestBacklogRule: backlogLateralSQL, the one definition of a group's
// pending and processing (QueueDepth, partitionCountsSQL), evaluated by
// PostgreSQL on inputs worked out by hand from the rule in admin.go's
// package comment: pending = max(next - max(start, first), 0) less the
// tombstones past max(start, first); processing = the lease's span less
// its tombstones, at least 0 and at most pending.
func TestBacklogRule(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	type in struct{ next, first, start, leased, delPending, delLeased int64 }
	for _, c := range []struct {
		name                string
		in                  in
		pending, processing int64
	}{
		{"empty partition", in{0, 0, 0, 0, 0, 0}, 0, 0},
		{"no cursor", in{10, 0, 0, 0, 0, 0}, 10, 0},
		{"cursor midway", in{10, 0, 4, 0, 0, 0}, 6, 0},
		{"cursor at next_offset", in{10, 0, 10, 0, 0, 0}, 0, 0},
		{"start past next_offset", in{10, 0, 12, 0, 0, 0}, 0, 0},
		{"retention past the cursor", in{10, 6, 2, 0, 0, 0}, 4, 0},
		{"retention deleted everything", in{10, 10, 2, 0, 0, 0}, 0, 0},
		{"live lease", in{10, 0, 4, 3, 0, 0}, 6, 3},
		{"lease wider than pending", in{10, 0, 4, 8, 0, 0}, 6, 6},
		{"tombstones in and past the lease", in{10, 0, 4, 3, 2, 1}, 4, 2},
		{"whole lease deleted", in{10, 0, 4, 3, 3, 3}, 3, 0},
		{"more deleted under the lease than it spans", in{10, 0, 4, 0, 1, 1}, 5, 0},
		{"every pending message deleted", in{10, 0, 4, 0, 6, 0}, 0, 0},
		{"retention and tombstones", in{20, 8, 2, 5, 4, 2}, 8, 3},
	} {
		var pending, processing int64
		err := st.Pool().QueryRow(ctx, `SELECT b.pending, b.processing
			FROM (SELECT $1::bigint AS next, $2::bigint AS first, $3::bigint AS start, $4::bigint AS leased,
				$5::bigint AS del_pending, $6::bigint AS del_leased) v
			CROSS JOIN `+pg.BacklogLateralSQL("v.next", "v.first", "v.start", "v.leased", "v.del_pending", "v.del_leased")+` b`,
			c.in.next, c.in.first, c.in.start, c.in.leased, c.in.delPending, c.in.delLeased).Scan(&pending, &processing)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if pending != c.pending || processing != c.processing {
			t.Errorf("%s %+v: pending %d processing %d, want %d %d", c.name, c.in, pending, processing, c.pending, c.processing)
		}
	}
}
