package pg

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/internal/benchcpu"
)

// BenchmarkPopPartitionClaimed: what the pop path does with one claimed
// cursor after its claim statement: decode offsets 530..629 from the
// segments read and hand them out as popped messages (popPartition with
// the claim's cursor write already done), for segments of 80 messages
// (a deep queue filled by 8 × 100 pushes) and of 5 (small projector
// batches); per message: ns/op / 100.
func BenchmarkPopPartitionClaimed(b *testing.B) {
	for _, per := range []int{80, 5} {
		b.Run("segment="+strconv.Itoa(per), func(b *testing.B) {
			items, _ := benchItems(1000, 1, false)
			pid := uuid.New()
			cc := &claimedCursor{id: pid, name: "p0", take: 100, updated: true,
				cursorRow: cursorRow{offset: 530, nextOffset: 1000, leaseEnd: -1}}
			for base := 0; base < len(items); base += per {
				if base+per-1 < 530 || base > 629 {
					continue
				}
				msgs := make([]Message, 0, per)
				for i := base; i < min(base+per, len(items)); i++ {
					msgs = append(msgs, items[i].Message)
				}
				cc.segs = append(cc.segs, claimedSegment{int64(base), int64(min(base+per, len(items)) - 1), EncodeSegment(nil, msgs)})
			}
			s := &Store{}
			q := &queueRow{name: "bench", leaseTime: 30, retryLimit: 3}
			req := PopRequest{Queue: "bench", Group: QueueModeGroup, Batch: 100, Partitions: 1}
			ctx := context.Background()
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			for b.Loop() {
				seed := uuid.New()
				res := &PopResult{LeaseID: seed, leaseSeed: seed}
				var w pgx.Batch
				msgs, err := s.popPartition(ctx, nil, q, pid, "p0", req, res, 100, 0, true, false, cc, &w)
				if err != nil || len(msgs) != 100 {
					b.Fatalf("%d messages, %v", len(msgs), err)
				}
				res.Messages = appendPopped(res.Messages, msgs)
			}
		})
	}
}
