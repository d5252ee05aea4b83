package pg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// BenchmarkProjectDedup times Project for batches of 800 new items over 10
// partitions, after 100 such batches (80,000 sidecar keys): items with
// client transactionIds as text ("k-<n>"), as UUIDv7 text (what Queen's
// clients send; the minted form, so also probed as a minted id), and
// without one (minted ids, not probed). µs/msg is wall time per item on
// the throwaway (non-durable) server: the sidecar's probe and insert are
// most of what differs between the kinds. pg-µs/msg is the CPU time of
// the database's backends (/proc, this host) per item: steadier than wall
// time on a loaded machine.
func BenchmarkProjectDedup(b *testing.B) {
	for _, kind := range []string{"client-text", "client-uuidv7", "minted"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			st := openStore(b)
			broker, wal, n := uuid.New(), uint64(0), 0
			batch := func() []pg.ProjectItem {
				items := make([]pg.ProjectItem, 800)
				at := now()
				for i := range items {
					id, _ := uuid.NewV7()
					txid := id.String()
					switch kind {
					case "client-text":
						txid = fmt.Sprintf("k-%d", n)
					case "client-uuidv7":
						u, _ := uuid.NewV7()
						txid = u.String()
					}
					n++
					items[i] = pg.ProjectItem{Queue: "bench", Partition: fmt.Sprintf("p%d", i%10), AcceptedAtMicros: at,
						Message: pg.Message{ID: id, TransactionID: txid, CreatedAtMicros: at, Payload: []byte(`{"n":1}`)}}
				}
				return items
			}
			project := func(items []pg.ProjectItem) {
				wal++
				if _, err := st.Project(ctx, broker, pg.Checkpoint{Index: wal, HasCRC: true}, items); err != nil {
					b.Fatal(err)
				}
			}
			for i := 0; i < 100; i++ {
				project(batch())
			}
			cpu0 := backendCPU(context.Background(), st)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				items := batch()
				b.StartTimer()
				project(items)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*800), "µs/msg")
			b.ReportMetric(float64(backendCPU(context.Background(), st)-cpu0)/1e3/float64(b.N*800), "pg-µs/msg")
		})
	}
}
