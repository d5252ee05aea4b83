package pg_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// TestListMessagesPagesAgree: every page of a message listing (offset,
// limit) is that slice of the whole listing, newest first, over
// partitions written in turns, segments of one to three messages, for
// pages that end inside, at and past the messages (the listing reads
// segments in chunks and sorts lazily: pg/messages.go, scanSegments).
func TestListMessagesPagesAgree(t *testing.T) {
	t.Parallel()
	st, ctx := setupStatus(t)
	for i := range 40 {
		store(t, ctx, st, "lm", fmt.Sprintf("p%d", i%3), 1+i%3)
	}
	now := time.Now()
	list := func(offset, limit int) []string {
		t.Helper()
		l, err := st.ListMessages(ctx, pg.MessageFilter{Queue: "lm", From: now.Add(-time.Hour), To: now.Add(time.Minute),
			Offset: offset, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range l.Messages {
			out = append(out, fmt.Sprintf("%s:%d", m.Partition, m.Offset))
		}
		return out
	}
	all := list(0, 1000)
	if len(all) != 79 { // 14 × 1 + 13 × 2 + 13 × 3
		t.Fatalf("whole listing: %d messages, want 79", len(all))
	}
	for _, offset := range []int{0, 1, 5, 17, 50, 79, 80, 90} {
		for _, limit := range []int{1, 3, 10, 40} {
			want := all[min(offset, len(all)):min(offset+limit, len(all))]
			if got := list(offset, limit); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("offset %d limit %d: %v, want %v", offset, limit, got, want)
			}
		}
	}
}
