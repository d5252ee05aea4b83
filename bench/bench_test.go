package bench

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

func TestLatencyQuantiles(t *testing.T) {
	t.Parallel()

	// 1..1000 ms, shuffled and split over two producers.
	var a, b Latency
	perm := rand.New(rand.NewPCG(1, 2)).Perm(1000)
	for i, v := range perm {
		d := time.Duration(v+1) * time.Millisecond
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var all Latency
	all.Merge(&a)
	all.Merge(&b)

	tests := []struct {
		name string
		lat  *Latency
		q    float64
		want time.Duration
	}{
		{"p0 is the minimum", &all, 0, 1 * time.Millisecond},
		{"p50", &all, 0.50, 500 * time.Millisecond},
		{"p90", &all, 0.90, 900 * time.Millisecond},
		{"p99", &all, 0.99, 990 * time.Millisecond},
		{"p999", &all, 0.999, 999 * time.Millisecond},
		{"p100 is the maximum", &all, 1, 1000 * time.Millisecond},
		{"empty", &Latency{}, 0.5, 0},
		{"one sample", latencyOf(7), 0.999, 7 * time.Millisecond},
		{"nearest rank rounds up", latencyOf(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"just above a rank", latencyOf(1, 2, 3, 4), 0.51, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := tt.lat.Quantile(tt.q); got != tt.want {
			t.Errorf("%s: Quantile(%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
	if got := all.Max(); got != time.Second {
		t.Errorf("Max = %v, want 1s", got)
	}

	// Recording after a quantile re-sorts.
	all.Record(0)
	if got := all.Quantile(0); got != 0 {
		t.Errorf("after Record(0): Quantile(0) = %v, want 0", got)
	}
}

func latencyOf(msList ...int) *Latency {
	var l Latency
	for _, v := range msList {
		l.Record(time.Duration(v) * time.Millisecond)
	}
	return &l
}

func TestNewReport(t *testing.T) {
	t.Parallel()

	cfg := Config{}.withDefaults(time.Unix(1700000000, 0))
	cfg.Producers, cfg.Batch = 2, 10
	c := &counts{requests: 40, items: 400}
	c.outcomes[Queued] = 300
	c.outcomes[Buffered] = 50
	c.outcomes[Duplicate] = 10
	c.outcomes[Failed] = 20
	c.outcomes[Unknown] = 20
	c.addError("HTTP 500: x")
	c.addError("HTTP 500: x")
	lat := latencyOf(1, 2, 3, 4)

	r := newReport(cfg, 2*time.Second, c, lat)
	if r.Accepted != 360 {
		t.Errorf("Accepted = %d, want 360 (queued+duplicate+buffered)", r.Accepted)
	}
	if r.MsgPerSec != 180 {
		t.Errorf("MsgPerSec = %v, want 180", r.MsgPerSec)
	}
	if r.ReqPerSec != 20 {
		t.Errorf("ReqPerSec = %v, want 20", r.ReqPerSec)
	}
	wantStatus := StatusCounts{Queued: 300, Duplicate: 10, Buffered: 50, Failed: 20}
	if r.Status != wantStatus {
		t.Errorf("Status = %+v, want %+v", r.Status, wantStatus)
	}
	if r.Errors != 2 || r.ErrorItems != 20 || r.ErrorSamples["HTTP 500: x"] != 2 {
		t.Errorf("errors = %d/%d %v, want 2/20 {HTTP 500: x: 2}", r.Errors, r.ErrorItems, r.ErrorSamples)
	}
	wantLat := LatencySummary{Count: 4, P50ms: 2, P90ms: 4, P99ms: 4, P999ms: 4, MaxMs: 4}
	if r.Latency != wantLat {
		t.Errorf("Latency = %+v, want %+v", r.Latency, wantLat)
	}
	// The default queue is named after the run (a minted-id run's queue
	// must hold only its own messages).
	if r.Queue != "bench-"+r.RunID || !strings.HasPrefix(r.RunID, "r") {
		t.Errorf("Queue = %q, run %q: want bench-<run id>", r.Queue, r.RunID)
	}

	// Zero wall time must not divide by zero.
	if z := newReport(cfg, 0, &counts{}, &Latency{}); z.MsgPerSec != 0 || z.ReqPerSec != 0 {
		t.Errorf("zero wall: rates %v %v, want 0 0", z.MsgPerSec, z.ReqPerSec)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| msg/s (accepted)", "180 |", "| latency p99.9", "2 / 20", "HTTP 500: x"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("json: %v", err)
	}
}

func TestErrorSamplesBounded(t *testing.T) {
	t.Parallel()
	var c counts
	for i := range 3 * maxErrSamples {
		c.addError(strings.Repeat("e", i+1))
	}
	if c.errors != 3*maxErrSamples || len(c.errSamples) != maxErrSamples {
		t.Errorf("errors %d kinds %d, want %d %d", c.errors, len(c.errSamples), 3*maxErrSamples, maxErrSamples)
	}
}

func TestPayloadAndTxID(t *testing.T) {
	t.Parallel()
	for _, random := range []bool{false, true} {
		for _, size := range []int{0, 10, 30, 256, 4096} {
			b := appendPayload(nil, 3, 12345, payloadShape{size, random}, noStamp)
			if !json.Valid(b) {
				t.Errorf("size %d random %v: invalid JSON %s", size, random, b)
			}
			if size >= 30 && len(b) != size {
				t.Errorf("size %d random %v: got %d bytes", size, random, len(b))
			}
		}
	}
	tx := string(appendTxID(nil, "rabc", 7, 42))
	if tx != "rabc-7-42" {
		t.Fatalf("txid %q", tx)
	}
	tests := []struct {
		txid         string
		p, seq       int
		ours, parsed bool
	}{
		{"rabc-7-42", 7, 42, true, true},
		{"rabd-7-42", 0, 0, false, false},
		{"rabc-7", 0, 0, true, false},
		{"rabc-x-1", 0, 0, true, false},
		{"rabc-1--1", 0, 0, true, false},
	}
	for _, tt := range tests {
		p, seq, ours, ok := parseTxID("rabc", tt.txid)
		if p != tt.p || seq != tt.seq || ours != tt.ours || ok != tt.parsed {
			t.Errorf("parseTxID(%q) = %d %d %v %v", tt.txid, p, seq, ours, ok)
		}
	}
}

// TestUUID7TxID: the UUIDv7 transactionIds are canonical lowercase text
// of a version-7 UUID carrying the send time, and parse back to their
// producer and sequence number only for their own run.
func TestUUID7TxID(t *testing.T) {
	t.Parallel()
	ms := time.Date(2026, 12, 6, 15, 0, 0, 123e6, time.UTC).UnixMilli()
	tx := string(appendUUID7TxID(nil, "rabc", 70000%maxUUID7Producers, 4_000_000_000, ms))
	u, err := uuid.Parse(tx)
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != tx {
		t.Fatalf("txid %q: not canonical UUIDv7 text (%v)", tx, err)
	}
	if sec, nsec := u.Time().UnixTime(); sec*1000+nsec/1e6 != ms {
		t.Errorf("txid %q: time %d ms, want %d", tx, sec*1000+nsec/1e6, ms)
	}
	if p, seq, ours, ok := parseUUID7TxID("rabc", tx); !ours || !ok || p != 70000%maxUUID7Producers || seq != 4_000_000_000 {
		t.Errorf("parseUUID7TxID(%q) = %d %d %v %v", tx, p, seq, ours, ok)
	}
	other := "rabd"
	if uuid7Tag(other) == uuid7Tag("rabc") {
		other = "rabe"
	}
	if _, _, ours, _ := parseUUID7TxID(other, tx); ours {
		t.Errorf("parseUUID7TxID(%q, %q): taken as the run's", other, tx)
	}
	for _, bad := range []string{strings.ToUpper(tx), "rabc-7-42", uuid.NewString()} {
		if _, _, _, ok := parseUUID7TxID("rabc", bad); ok {
			t.Errorf("parseUUID7TxID(%q) parsed", bad)
		}
	}
}

func TestParseVmHWM(t *testing.T) {
	t.Parallel()
	n, err := parseVmHWM(strings.NewReader("Name:\tqueen\nVmPeak:\t  1000 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1000 kB\n"))
	if err != nil || n != 2048*1024 {
		t.Errorf("parseVmHWM = %d, %v; want %d", n, err, 2048*1024)
	}
	if _, err := parseVmHWM(strings.NewReader("Name:\tx\n")); err != errNoVmHWM {
		t.Errorf("no VmHWM: err = %v", err)
	}
}

// stored builds what the broker should have stored for item seq of producer p.
func stored(l *Ledger, p, seq int, offset int64) pg.StoredMessage {
	return pg.StoredMessage{
		Queue: l.Queue, Partition: string(appendPartition(nil, partitionIndex(p, seq, l.Partitions))), Offset: offset,
		Message: pg.Message{TransactionID: string(appendTxID(nil, l.RunID, p, seq)),
			Payload: appendPayload(nil, p, seq, l.shape(), l.sentAt(p, seq))},
	}
}

// perfect returns a ledger of two producers × 6 items over 3 partitions,
// all queued, and the messages a correct broker stores for it.
func perfect() (*Ledger, []pg.StoredMessage) {
	l := &Ledger{RunID: "rt", Queue: "q", Partitions: 3, PayloadBytes: 64, Outcomes: make([][]Outcome, 2)}
	var msgs []pg.StoredMessage
	next := map[string]int64{}
	for seq := range 6 {
		for p := range 2 {
			l.Outcomes[p] = append(l.Outcomes[p], Queued)
			m := stored(l, p, seq, 0)
			m.Offset = next[m.Partition]
			next[m.Partition]++
			msgs = append(msgs, m)
		}
	}
	// Another run's message in the same queue is ignored.
	msgs = append(msgs, pg.StoredMessage{Partition: "p0", Offset: 99, Message: pg.Message{TransactionID: "rother-0-0"}})
	return l, msgs
}

func TestCheck(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		edit  func(l *Ledger, msgs []pg.StoredMessage) []pg.StoredMessage
		field func(v *VerifyResult) int
		want  int
	}{
		{"perfect", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage { return m },
			func(v *VerifyResult) int { return v.Stored }, 12},
		{"missing", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage { return m[1:] },
			func(v *VerifyResult) int { return v.Missing }, 1},
		{"buffered but missing", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			l.Outcomes[0][0] = Buffered
			return m[1:]
		}, func(v *VerifyResult) int { return v.Missing }, 1},
		{"stored twice", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			return append(m, stored(l, 1, 5, 100))
		}, func(v *VerifyResult) int { return v.StoredTwice }, 1},
		{"failed stored", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			l.Outcomes[1][2] = Failed
			return m
		}, func(v *VerifyResult) int { return v.FailedStored }, 1},
		{"failed absent is fine", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			l.Outcomes[0][0] = Failed
			return m[1:]
		}, func(v *VerifyResult) int { return v.FailedStored + v.Missing }, 0},
		{"unknown stored is fine", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			l.Outcomes[0][0] = Unknown
			return m
		}, func(v *VerifyResult) int { return v.UnknownStored }, 1},
		{"duplicate verdict", func(l *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			l.Outcomes[0][3] = Duplicate
			return m
		}, func(v *VerifyResult) int { return v.DuplicateVerdict }, 1},
		{"out of order", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			// producer 0: seq 0 and 3 both land in p0; swap their offsets.
			var a, b int
			for i := range m {
				switch m[i].TransactionID {
				case "rt-0-0":
					a = i
				case "rt-0-3":
					b = i
				}
			}
			m[a].Offset, m[b].Offset = m[b].Offset, m[a].Offset
			return m
		}, func(v *VerifyResult) int { return v.OutOfOrder }, 1},
		{"wrong partition", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			m[0].Partition = "p2"
			m[0].Offset = 50
			return m
		}, func(v *VerifyResult) int { return v.WrongPartition }, 1},
		{"payload changed", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			m[4].Payload = []byte(`{"p":0}`)
			return m
		}, func(v *VerifyResult) int { return v.PayloadMismatch }, 1},
		{"never sent", func(_ *Ledger, m []pg.StoredMessage) []pg.StoredMessage {
			return append(m, pg.StoredMessage{Partition: "p1", Offset: 70, Message: pg.Message{TransactionID: "rt-0-6"}})
		}, func(v *VerifyResult) int { return v.NeverSent }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, msgs := perfect()
			v := check(l, tt.edit(l, msgs))
			if got := tt.field(v); got != tt.want {
				t.Errorf("got %d, want %d; result %+v", got, tt.want, v)
			}
			wantOK := tt.name == "perfect" || strings.HasSuffix(tt.name, "is fine")
			if v.OK() != wantOK {
				t.Errorf("OK() = %v, want %v; problems %q", v.OK(), wantOK, v.Problems)
			}
		})
	}
}
