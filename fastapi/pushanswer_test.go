package fastapi

import (
	"errors"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/ingest"
)

// TestPushAnswerMatchesMarshal: the hand-appended push answer is byte for
// byte what json.Marshal gives for the same results, escaping included.
func TestPushAnswerMatchesMarshal(t *testing.T) {
	cases := [][]ingest.Result{
		{},
		{{Index: 0, MessageID: "0190a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b", TransactionID: "0190a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b", QueueName: "orders", Status: ingest.StatusQueued}},
		{
			{Index: 0, MessageID: "a", TransactionID: `tx "quoted" \ back`, QueueName: "q<&>", Status: ingest.StatusDuplicate},
			{Index: 1, MessageID: "b", TransactionID: "ctl\x01\n\ttab", QueueName: "名前", Status: ingest.StatusBuffered},
			{Index: 12345, MessageID: "c", TransactionID: "\u2028\u2029", QueueName: "q", Status: ingest.StatusFailed},
			{Index: 12346, MessageID: "d", TransactionID: "d", QueueName: "q", Status: ingest.StatusFailed,
				Error: ingest.FailedReason(errors.New(`disk "full"`))},
		},
		// The same id and transactionId (a minted id), plain and escaped.
		{
			{Index: 0, MessageID: "same", TransactionID: "same", QueueName: "q", Status: ingest.StatusQueued},
			{Index: 1, MessageID: `d"<\`, TransactionID: `d"<\`, QueueName: "q", Status: ingest.StatusQueued},
			{Index: 2, MessageID: "", TransactionID: "", QueueName: "q", Status: ingest.StatusQueued},
		},
	}
	for _, res := range cases {
		want, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPushAnswer(nil, res); string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

// BenchmarkPushAnswer: encoding the answer of a 100-item push.
func BenchmarkPushAnswer(b *testing.B) {
	res := make([]ingest.Result, 100)
	for i := range res {
		res[i] = ingest.Result{Index: i, MessageID: "0190a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b",
			TransactionID: "0190a4b2-7c1d-7e3f-8a9b-0c1d2e3f4a5b", QueueName: "bench", Status: ingest.StatusQueued}
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendPushAnswer(buf[:0], res)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(res); err != nil {
				b.Fatal(err)
			}
		}
	})
}
