package fastapi

import (
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/internal/benchcpu"
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
			defer benchcpu.Report(b)()
			for b.Loop() {
				ctx.Response.Reset()
				writePop(&ctx, req, res)
			}
		})
	}
}

// refPopMessage is the pop answer's message shape for a reference
// encoding through goccy/go-json (field order as in the answer).
type refPopMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	PartitionID   string          `json:"partitionId"`
	Partition     string          `json:"partition"`
	Queue         string          `json:"queue"`
	Offset        int64           `json:"offset"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
}

type refPopAnswer struct {
	Success           bool            `json:"success"`
	Queue             string          `json:"queue"`
	Partition         string          `json:"partition"`
	PartitionID       string          `json:"partitionId"`
	LeaseID           string          `json:"leaseId"`
	ConsumerGroup     string          `json:"consumerGroup"`
	PartitionsClaimed int             `json:"partitionsClaimed"`
	Messages          []refPopMessage `json:"messages"`
}

// TestWritePopMatchesLibraryEncoding: the hand-appended answer is byte for
// byte what goccy/go-json makes of the same shape, for strings that need
// escaping (HTML characters, quotes, control characters, non-ASCII,
// U+2028), messages of two partitions, trace ids and producer subjects
// present and absent, times before and after 1970, with and without a
// lease; and a payload with insignificant whitespace stays verbatim.
func TestWritePopMatchesLibraryEncoding(t *testing.T) {
	strs := []string{"plain-1", "a<b", "c>d", "e&f", `a"b\c`, "<tag>&amp;", "tab\there\nnl\x01\x1f", "ünï¢ødé 日本", "line\u2028sep\u2029", ""}
	pids := []uuid.UUID{uuid.New(), uuid.New()}
	trace := uuid.New()
	times := []int64{1735787045123456, 1735787045999999, 1735787046000000, -1, -1_500_001, 0}
	for _, leased := range []bool{true, false} {
		res := &pg.PopResult{Claimed: []pg.ClaimedPartition{{ID: pids[0], Name: "p<0>"}, {ID: pids[1], Name: "p1"}}}
		if leased {
			res.LeaseID = uuid.New()
		}
		group := "grp&\"1\""
		want := refPopAnswer{Success: true, Queue: "q\u00e9", Partition: "p<0>", PartitionID: pids[0].String(),
			ConsumerGroup: group, PartitionsClaimed: 2}
		if leased {
			want.LeaseID = res.LeaseID.String()
		}
		for i := range 14 {
			s := strs[i%len(strs)]
			m := pg.PoppedMessage{LeaseID: res.LeaseID, StoredMessage: pg.StoredMessage{
				Queue: "q\u00e9", Partition: res.Claimed[i/7].Name, PartitionID: pids[i/7], Offset: int64(i * 1000),
				Message: pg.Message{ID: uuid.New(), TransactionID: s, CreatedAtMicros: times[i%len(times)],
					Payload: []byte(`{"i":` + strconv.Itoa(i) + `,"s":"x"}`)}}}
			ref := refPopMessage{ID: m.ID.String(), TransactionID: s, Data: m.Payload,
				CreatedAt:   time.UnixMicro(m.CreatedAtMicros).UTC().Format(MicrosLayout),
				PartitionID: m.PartitionID.String(), Partition: m.Partition, Queue: m.Queue, Offset: m.Offset,
				LeaseID: want.LeaseID, ConsumerGroup: group}
			if i%2 == 0 {
				sub := strs[(i+3)%len(strs)]
				m.ProducerSub, ref.ProducerSub = &sub, &sub
			}
			if i%3 == 0 {
				m.TraceID = &trace
				ts := trace.String()
				ref.TraceID = &ts
			}
			res.Messages = append(res.Messages, m)
			want.Messages = append(want.Messages, ref)
		}
		wantJSON, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var ctx fasthttp.RequestCtx
		writePop(&ctx, pg.PopRequest{Group: group}, res)
		if got := ctx.Response.Body(); !bytes.Equal(got, wantJSON) {
			t.Fatalf("leased=%v:\n got %s\nwant %s", leased, got, wantJSON)
		}
	}

	// Verbatim payload: whitespace and key order kept.
	req, res := popAnswer(2, 0)
	res.Messages[1].Payload = []byte("{ \"b\" : 1,\n  \"a\" : [ 1 , 2 ] }")
	var ctx fasthttp.RequestCtx
	writePop(&ctx, req, res)
	if !bytes.Contains(ctx.Response.Body(), []byte(`"data":{ "b" : 1,`+"\n"+`  "a" : [ 1 , 2 ] },"producerSub"`)) {
		t.Fatalf("payload not verbatim: %s", ctx.Response.Body())
	}
}

// TestAppendAckResultsMatchesMarshal: the one-pass ack answer is byte for
// byte json.Marshal of the []ackResult it stands for: errors and null,
// omitted empty names, strings that need escaping (quotes, HTML
// characters, control characters, non-ASCII), and runs of equal results.
func TestAppendAckResultsMatchesMarshal(t *testing.T) {
	reqs := []pg.AckRequest{{TransactionID: "tx-1"}, {TransactionID: `a"b\c<d>&e` + "\x01\u00e9\u2028"}, {TransactionID: ""},
		{TransactionID: "tx-4"}, {TransactionID: "tx-5"}, {TransactionID: "tx-6"}, {TransactionID: "tx-7"}, {TransactionID: "tx-8"}}
	ok := pg.AckResult{Success: true, QueueName: "q", PartitionName: "p"}
	res := []pg.AckResult{
		{Success: true, QueueName: "q", PartitionName: "p", LeaseReleased: true},
		{Error: pg.ErrTextInvalidLease, QueueName: "q<1>"},
		{Error: "bad \"status\"\n", DLQ: true, PartitionName: "\u00fc"},
		// Runs of equal results (their answer's tail is copied from the
		// one before), broken by one that differs in a single field.
		ok, ok, {Success: true, QueueName: "q", PartitionName: "p", LeaseReleased: true}, ok, ok,
	}
	want := make([]ackResult, len(res))
	for i, r := range res {
		want[i] = ackResult{Index: i, TransactionID: reqs[i].TransactionID, Success: r.Success, QueueName: r.QueueName,
			PartitionName: r.PartitionName, LeaseReleased: r.LeaseReleased, DLQ: r.DLQ}
		if r.Error != "" {
			e := r.Error
			want[i].Error = &e
		}
	}
	for n := 0; n <= len(res); n++ {
		exp, err := json.Marshal(want[:n])
		if err != nil {
			t.Fatal(err)
		}
		if got := appendAckResults(nil, reqs[:n], res[:n]); !bytes.Equal(got, exp) {
			t.Errorf("%d results:\n got  %s\n want %s", n, got, exp)
		}
	}
}

// ackAnswer is the answer to an ack/batch of n messages of one lease.
func ackAnswer(n int) ([]pg.AckRequest, []pg.AckResult) {
	reqs := make([]pg.AckRequest, n)
	res := make([]pg.AckResult, n)
	for i := range n {
		reqs[i].TransactionID = uuid.New().String()
		res[i] = pg.AckResult{Success: true, QueueName: "bench", PartitionName: "p0", LeaseReleased: i == n-1}
	}
	return reqs, res
}

// BenchmarkAckAnswer: the answer to an ack/batch of 100 messages, in one
// pass (appendAckResults, "append") against json.Marshal of the
// []ackResult it replaces ("marshal").
func BenchmarkAckAnswer(b *testing.B) {
	reqs, res := ackAnswer(100)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendAckResults(buf[:0], reqs, res)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out := make([]ackResult, len(res))
			for i, r := range res {
				out[i] = ackResult{Index: i, TransactionID: reqs[i].TransactionID, Success: r.Success, QueueName: r.QueueName,
					PartitionName: r.PartitionName, LeaseReleased: r.LeaseReleased, DLQ: r.DLQ}
			}
			if _, err := json.Marshal(out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPopAnswerLen: writePop sizes its buffer exactly (what keeps it in
// fasthttp's body pool) for strings that need no escaping, for leased and
// autoAck answers, with and without trace ids and producer subjects,
// several partitions and multi-digit offsets; with strings that need
// escaping it counts short, and the answer is still whole.
func TestPopAnswerLen(t *testing.T) {
	build := func(escaped bool) (pg.PopRequest, *pg.PopResult) {
		req, res := popAnswer(5, 40)
		trace := uuid.New()
		sub, tx, part := "sub-2", "tx-3", "p1"
		if escaped {
			sub, tx, part = `sub "<é>" \ &`, "tx\n\"<>", `p"1`
		}
		res.Messages[1].TraceID = &trace
		res.Messages[2].ProducerSub = nil
		res.Messages[3].ProducerSub = &sub
		res.Messages[3].TransactionID = tx
		res.Messages[4].Partition, res.Messages[4].PartitionID, res.Messages[4].Offset = part, uuid.New(), 7
		res.Claimed = append(res.Claimed, pg.ClaimedPartition{ID: res.Messages[4].PartitionID, Name: part})
		return req, res
	}
	for _, escaped := range []bool{false, true} {
		req, res := build(escaped)
		groups := []string{"workers", "__QUEUE_MODE__"}
		if escaped {
			groups = append(groups, `g<&>"`)
		}
		for _, autoAck := range []bool{false, true} {
			for _, group := range groups {
				r := *res
				if autoAck {
					r.LeaseID = uuid.Nil
				}
				var ctx fasthttp.RequestCtx
				q := req
				q.Group = group
				writePop(&ctx, q, &r)
				body := ctx.Response.Body()
				if !json.Valid(body) {
					t.Fatalf("not JSON: %s", body)
				}
				lease := []byte(`""`)
				if !autoAck {
					lease = appendUUID(nil, r.LeaseID, true)
				}
				got := popAnswerLen(&r, lease, appendJSONString(nil, group))
				if (!escaped && got != len(body)) || (escaped && got >= len(body)) {
					t.Errorf("escaped %v autoAck %v group %q: popAnswerLen %d, answer %d bytes", escaped, autoAck, group, got, len(body))
				}
			}
		}
	}
	for _, v := range []int64{0, 9, 10, 99, 100, 12345, -1, -10, math.MaxInt64, math.MinInt64} {
		if got, want := intLen(v), len(strconv.FormatInt(v, 10)); got != want {
			t.Errorf("intLen(%d) = %d, want %d", v, got, want)
		}
	}
}
