package pg_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestProjectKeptWriteBuffer: a projection batch of some hundred KiB is
// written through the write buffer its connection keeps (pg/wbuf.go), in
// one round trip and the long way alike, and the stored messages read back
// as pushed.
func TestProjectKeptWriteBuffer(t *testing.T) {
	s, _ := testenv.OpenSchemaStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	broker := uuid.New()
	batch := func(n int) ([]pg.ProjectItem, []byte) {
		marker := []byte(fmt.Sprintf(`"wbuf-%d-%s"`, n, uuid.NewString()))
		items := make([]pg.ProjectItem, 200)
		for i := range items {
			txid := ""
			if i%2 == 0 {
				txid = fmt.Sprintf("wbuf-%d-%d", n, i)
			}
			items[i] = item("wbuf", txid, time.Now().UnixMicro())
			items[i].Partition = fmt.Sprintf("p%d", i%4)
			items[i].Message.Payload = append(append([]byte(`[`), bytes.Repeat(append(marker, ','), 30)...), '1', ']')
		}
		return items, marker
	}
	var sent [][]pg.ProjectItem
	for n := 1; n <= 4; n++ {
		items, marker := batch(n)
		out, err := s.Project(ctx, broker, pg.Checkpoint{Index: uint64(n), HasCRC: true}, items)
		if err != nil {
			t.Fatal(err)
		}
		for i := range out {
			if out[i].Duplicate || out[i].MessageID != items[i].Message.ID {
				t.Fatalf("batch %d item %d: %+v", n, i, out[i])
			}
		}
		sent = append(sent, items)
		found := false
		for _, buf := range pg.KeptWriteBuffers(ctx, s) {
			// The segments and, after the sidecar rows, the checkpoint
			// (its broker id): the reservation held the whole batch.
			all := buf[:cap(buf)]
			found = found || (bytes.Contains(all, marker) && bytes.Contains(all, broker[:]))
		}
		// A batch with a statement new to the connection is sent after
		// pgx's prepare round trip, which flushed the reserved buffer away:
		// from the third batch on (both ways' statements prepared), every
		// batch goes through the kept buffer.
		if !found && n >= 3 {
			t.Fatalf("batch %d: no kept write buffer holds the batch", n)
		}
	}
	if c, _ := pg.PredictedBatches(s); c < 1 {
		t.Fatalf("%d batches in one round trip, want some", c)
	}
	// Every message reads back as pushed.
	for p := 0; p < 4; p++ {
		msgs, err := s.ReadPartition(ctx, "wbuf", fmt.Sprintf("p%d", p))
		if err != nil {
			t.Fatal(err)
		}
		var want []pg.Message
		for _, items := range sent {
			for i := p; i < len(items); i += 4 {
				want = append(want, items[i].Message)
			}
		}
		if len(msgs) != len(want) {
			t.Fatalf("partition p%d: %d messages, want %d", p, len(msgs), len(want))
		}
		for i := range msgs {
			if msgs[i].ID != want[i].ID || msgs[i].TransactionID != want[i].TransactionID || !bytes.Equal(msgs[i].Payload, want[i].Payload) {
				t.Fatalf("partition p%d message %d differs", p, i)
			}
		}
	}
}
