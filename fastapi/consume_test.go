package fastapi

import (
	"bytes"
	"strconv"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// popAnswer is a pop of n messages of payload bytes each from one
// partition of queue "bench", as the consume path hands it to writePop.
func popAnswer(n, payload int) (pg.PopRequest, *pg.PopResult) {
	pid := uuid.New()
	lease := uuid.New()
	res := &pg.PopResult{LeaseID: lease, Claimed: []pg.ClaimedPartition{{ID: pid, Name: "p0"}}}
	body := append([]byte(`{"pad":"`), bytes.Repeat([]byte{'x'}, max(payload-10, 0))...)
	body = append(body, `"}`...)
	sub := "producer-1"
	for i := range n {
		res.Messages = append(res.Messages, pg.PoppedMessage{LeaseID: lease, StoredMessage: pg.StoredMessage{
			Queue: "bench", Partition: "p0", PartitionID: pid, Offset: int64(1000 + i),
			Message: pg.Message{ID: uuid.New(), TransactionID: "run-0-" + strconv.Itoa(i),
				CreatedAtMicros: 1735787045123456 + int64(i), ProducerSub: &sub, Payload: body},
		}})
	}
	return pg.PopRequest{Queue: "bench", Group: "workers", Batch: n}, res
}

// TestWritePop: the hand-written pop answer is valid JSON with every
// message, its payload byte for byte, and the lease and group on each.
func TestWritePop(t *testing.T) {
	req, res := popAnswer(3, 64)
	var ctx fasthttp.RequestCtx
	writePop(&ctx, req, res)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
	var got struct {
		Success  bool   `json:"success"`
		Queue    string `json:"queue"`
		LeaseID  string `json:"leaseId"`
		Messages []struct {
			TransactionID string          `json:"transactionId"`
			Data          json.RawMessage `json:"data"`
			CreatedAt     string          `json:"createdAt"`
			Offset        int64           `json:"offset"`
			LeaseID       string          `json:"leaseId"`
			ConsumerGroup string          `json:"consumerGroup"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(ctx.Response.Body(), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, ctx.Response.Body())
	}
	if !got.Success || got.Queue != "bench" || got.LeaseID != res.LeaseID.String() || len(got.Messages) != 3 {
		t.Fatalf("answer %+v", got)
	}
	for i, m := range got.Messages {
		want := &res.Messages[i]
		if m.TransactionID != want.TransactionID || !bytes.Equal(m.Data, want.Payload) || m.Offset != want.Offset ||
			m.LeaseID != res.LeaseID.String() || m.ConsumerGroup != "workers" || m.CreatedAt != "2025-01-02T03:04:05.12345"+strconv.Itoa(6+i)+"Z" {
			t.Errorf("message %d: %+v", i, m)
		}
	}
}

// BenchmarkWritePop encodes a pop answer (what a consumer receives for one
// pop) of 1, 100 and 1,000 messages of 256-byte payloads; the per-message
// figure is ns/op divided by the batch.
func BenchmarkWritePop(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
			req, res := popAnswer(n, 256)
			var ctx fasthttp.RequestCtx
			writePop(&ctx, req, res)
			b.SetBytes(int64(len(ctx.Response.Body())))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ctx.Response.Reset()
				writePop(&ctx, req, res)
			}
		})
	}
}
