package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

func TestStampedPayload(t *testing.T) {
	t.Parallel()

	// Without a send time the payload is what runs without consumers
	// always sent.
	if got, want := string(appendPayload(nil, 3, 12, payloadShape{bytes: 30}, noStamp)), `{"p":3,"s":12,"pad":"xxxxxxx"}`; got != want {
		t.Errorf("unstamped payload %s, want %s", got, want)
	}

	const now = int64(1767225600123456789)
	for _, size := range []int{0, 10, 60, 256, 4096} {
		b, at := appendPayloadAt(nil, 3, 12345, payloadShape{size, size%2 == 0}, now)
		if !json.Valid(b) {
			t.Errorf("size %d: invalid JSON %s", size, b)
		}
		if size >= 60 && len(b) != size {
			t.Errorf("size %d: got %d bytes", size, len(b))
		}
		var v struct {
			P, S int
			T    int64
		}
		if err := json.Unmarshal(b, &v); err != nil || v.P != 3 || v.S != 12345 || v.T != now {
			t.Errorf("size %d: decoded %+v, %v", size, v, err)
		}
		if got, ok := parseStamp(b[at : at+stampWidth]); !ok || got != now {
			t.Errorf("size %d: stamp at %d reads %d %v", size, at, got, ok)
		}
		// Patching the stamp in place gives the payload built with it.
		putStamp(b[at:at+stampWidth], 42)
		if want := appendPayload(nil, 3, 12345, payloadShape{size, size%2 == 0}, 42); !bytes.Equal(b, want) {
			t.Errorf("size %d: patched %s, want %s", size, b, want)
		}
	}

	for _, ts := range []int64{0, 7, 999999999999999999, now} {
		b := make([]byte, stampWidth)
		putStamp(b, ts)
		if got, ok := parseStamp(b); !ok || got != ts {
			t.Errorf("stamp %d: %q reads %d %v", ts, b, got, ok)
		}
	}
	for _, bad := range []string{"", strings.Repeat(" ", stampWidth), " 12345678901234567x", "1234"} {
		if _, ok := parseStamp([]byte(bad)); ok {
			t.Errorf("parseStamp(%q) ok", bad)
		}
	}
}

func TestParsePartition(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{"p0": 0, "p12": 12, "p": -1, "p07": -1, "p-1": -1, "p+1": -1, "q1": -1, "": -1} {
		if got := parsePartition(name); got != want {
			t.Errorf("parsePartition(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestExamine(t *testing.T) {
	t.Parallel()
	for _, random := range []bool{false, true} {
		t.Run(fmt.Sprintf("random=%v", random), func(t *testing.T) { testExamine(t, payloadShape{128, random}) })
	}
}

func testExamine(t *testing.T, shape payloadShape) {
	const sent = int64(1767225600000000000)
	good := appendPayload(nil, 2, 17, shape, sent)
	tampered := bytes.Clone(good)
	tampered[len(tampered)-3] = '.' // in neither pad
	tests := []struct {
		name        string
		txid, part  string
		data        []byte
		wantOurs    bool
		wantSent    int64
		wantBad     bool
		wantProd    int32
		wantPartIdx int32
	}{
		{"good", "rt-2-17", "p9", good, true, sent, false, 2, 9},
		{"other run", "rx-2-17", "p9", good, false, noStamp, false, 0, 0},
		{"bad id", "rt-2", "p9", good, true, noStamp, true, -1, 9},
		{"padding changed", "rt-2-17", "p9", tampered, true, noStamp, true, 2, 9},
		{"no send time", "rt-2-17", "p9", appendPayload(nil, 2, 17, shape, noStamp), true, noStamp, true, 2, 9},
		{"another item's payload", "rt-2-18", "p9", good, true, noStamp, true, 2, 9},
		{"foreign partition", "rt-2-17", "P9", good, true, sent, false, 2, -1},
	}
	var scratch []byte
	for _, tt := range tests {
		d, s, ours := examine(itemIDs{run: "rt"}, shape, tt.txid, tt.part, 5, tt.data, &scratch)
		if ours != tt.wantOurs || s != tt.wantSent {
			t.Errorf("%s: ours %v sent %d, want %v %d", tt.name, ours, s, tt.wantOurs, tt.wantSent)
			continue
		}
		if ours && (d.badPayload != tt.wantBad || d.producer != tt.wantProd || d.part != tt.wantPartIdx || d.offset != 5) {
			t.Errorf("%s: delivery %+v", tt.name, d)
		}
	}
}

// deliveriesOf is the arrival order a correct broker gives one group for
// the ledger of perfect(): partition by partition, in offset order.
func deliveriesOf(msgs []pg.StoredMessage, run string) []delivery {
	var ds []delivery
	for _, m := range msgs {
		p, seq, ours, ok := parseTxID(run, m.TransactionID)
		if !ours || !ok {
			continue
		}
		ds = append(ds, delivery{producer: int32(p), part: int32(parsePartition(m.Partition)), seq: int64(seq), offset: m.Offset})
	}
	return ds
}

func find(ds []delivery, p, seq int) int {
	for i, d := range ds {
		if int(d.producer) == p && int(d.seq) == seq {
			return i
		}
	}
	panic("no such delivery")
}

func TestCheckGroup(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		byOffset bool
		edit     func(l *Ledger, ds []delivery) []delivery
		field    func(c *GroupCheck) int
		want     int
		ok       bool
	}{
		{"perfect", false, func(_ *Ledger, ds []delivery) []delivery { return ds },
			func(c *GroupCheck) int { return c.Distinct*100 + c.Expected }, 1212, true},
		{"missing", false, func(_ *Ledger, ds []delivery) []delivery { return ds[1:] },
			func(c *GroupCheck) int { return c.Missing }, 1, false},
		{"delivered twice in a row", false, func(_ *Ledger, ds []delivery) []delivery {
			return append(ds[:3:3], append([]delivery{ds[2]}, ds[3:]...)...)
		}, func(c *GroupCheck) int { return c.Duplicates*10 + c.OutOfOrder }, 10, false},
		{"redelivered after later items is a duplicate, not disorder", false, func(_ *Ledger, ds []delivery) []delivery {
			return append(ds, ds[find(ds, 0, 0)])
		}, func(c *GroupCheck) int { return c.Duplicates*10 + c.OutOfOrder }, 10, false},
		{"arrival out of order", false, func(_ *Ledger, ds []delivery) []delivery {
			// producer 0: seq 0 and 3 both come from p0.
			a, b := find(ds, 0, 0), find(ds, 0, 3)
			ds[a], ds[b] = ds[b], ds[a]
			return ds
		}, func(c *GroupCheck) int { return c.OutOfOrder }, 1, false},
		{"arrival out of order but offsets in order is fine by offset", true, func(_ *Ledger, ds []delivery) []delivery {
			a, b := find(ds, 0, 0), find(ds, 0, 3)
			ds[a], ds[b] = ds[b], ds[a]
			return ds
		}, func(c *GroupCheck) int { return c.OutOfOrder }, 0, true},
		{"offsets out of order by offset", true, func(_ *Ledger, ds []delivery) []delivery {
			a, b := find(ds, 0, 0), find(ds, 0, 3)
			ds[a].offset, ds[b].offset = ds[b].offset, ds[a].offset
			return ds
		}, func(c *GroupCheck) int { return c.OutOfOrder }, 1, false},
		{"failed delivered", false, func(l *Ledger, ds []delivery) []delivery {
			l.Outcomes[1][2] = Failed
			return ds
		}, func(c *GroupCheck) int { return c.FailedConsumed }, 1, false},
		{"failed absent is fine", false, func(l *Ledger, ds []delivery) []delivery {
			l.Outcomes[0][0] = Failed
			return ds[1:]
		}, func(c *GroupCheck) int { return c.FailedConsumed + c.Missing }, 0, true},
		{"unknown delivered is fine", false, func(l *Ledger, ds []delivery) []delivery {
			l.Outcomes[0][0] = Unknown
			return ds
		}, func(c *GroupCheck) int { return c.UnknownConsumed*100 + c.Expected }, 111, true},
		{"unknown absent is fine", false, func(l *Ledger, ds []delivery) []delivery {
			l.Outcomes[0][0] = Unknown
			return ds[1:]
		}, func(c *GroupCheck) int { return c.Missing }, 0, true},
		{"buffered but missing", false, func(l *Ledger, ds []delivery) []delivery {
			l.Outcomes[0][0] = Buffered
			return ds[1:]
		}, func(c *GroupCheck) int { return c.Missing }, 1, false},
		{"never sent", false, func(_ *Ledger, ds []delivery) []delivery {
			return append(ds, delivery{producer: 0, part: 0, seq: 6, offset: 40}, delivery{producer: -1, part: 1, offset: 41})
		}, func(c *GroupCheck) int { return c.NeverSent }, 2, false},
		{"wrong partition", false, func(_ *Ledger, ds []delivery) []delivery {
			ds[0].part = 2
			return ds
		}, func(c *GroupCheck) int { return c.WrongPartition }, 1, false},
		{"unknown partition", false, func(_ *Ledger, ds []delivery) []delivery {
			ds[0].part = -1
			return ds
		}, func(c *GroupCheck) int { return c.WrongPartition }, 1, false},
		{"payload mismatch", false, func(_ *Ledger, ds []delivery) []delivery {
			ds[4].badPayload = true
			return ds
		}, func(c *GroupCheck) int { return c.PayloadMismatch }, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, msgs := perfect()
			ds := tt.edit(l, deliveriesOf(msgs, l.RunID))
			c := checkGroup("g", l, ds, tt.byOffset)
			if got := tt.field(c); got != tt.want {
				t.Errorf("got %d, want %d; check %+v", got, tt.want, c)
			}
			if c.OK() != tt.ok {
				t.Errorf("OK() = %v, want %v; problems %q", c.OK(), tt.ok, c.Problems)
			}
			if c.Delivered != len(ds) {
				t.Errorf("Delivered = %d, want %d", c.Delivered, len(ds))
			}
			var text bytes.Buffer
			c.writeText(&text)
			if want := "consume verify g: OK"; strings.HasPrefix(text.String(), want) != tt.ok {
				t.Errorf("text %q: OK prefix %v", text.String(), tt.ok)
			}
		})
	}

	t.Run("ack failures are problems", func(t *testing.T) {
		t.Parallel()
		l, msgs := perfect()
		c := checkGroup("g", l, deliveriesOf(msgs, l.RunID), false)
		c.AckFailed = 3
		var text bytes.Buffer
		c.writeText(&text)
		if c.OK() || !strings.Contains(text.String(), "3 items popped but their ack was not confirmed") {
			t.Errorf("OK() = %v, text %q", c.OK(), text.String())
		}
	})
}

func TestGroupComplete(t *testing.T) {
	t.Parallel()
	l, msgs := perfect()
	sent := []*atomic.Int64{new(atomic.Int64), new(atomic.Int64)}
	for _, s := range sent {
		s.Store(6)
	}
	l.Outcomes[1][5] = Failed // not required
	g := newGroup("bench-g0", sent)
	ds := deliveriesOf(msgs, l.RunID)
	at := time.Unix(100, 0)

	g.record(ds[:5], at)
	g.record(ds[:1], at)                                            // a repeat
	g.record([]delivery{{producer: 0, seq: 1 << 40}}, at)           // never sent: must not size the table
	g.record([]delivery{{producer: 7, seq: 0}, {producer: -1}}, at) // no such producer
	if g.complete() {
		t.Fatal("complete before the producers are done")
	}
	g.producersDone(l)
	if g.complete() || g.remaining != 11-5 {
		t.Fatalf("remaining %d, want 6", g.remaining)
	}
	for i := 5; i < len(ds); i++ {
		if d := ds[i]; d.producer == 1 && d.seq == 5 {
			continue // the failed one
		}
		if g.complete() {
			t.Fatalf("complete with %d deliveries", i)
		}
		g.record(ds[i:i+1], at.Add(time.Duration(i)))
	}
	if !g.complete() {
		t.Fatalf("not complete; remaining %d", g.remaining)
	}
	if len(g.seen[0]) > 6 {
		t.Errorf("seen table grew to %d for an unsent seq", len(g.seen[0]))
	}
	// The last delivery is the failed item's, never recorded.
	if want := at.Add(time.Duration(len(ds) - 2)); !g.last.Equal(want) {
		t.Errorf("last = %v, want %v", g.last, want)
	}
	if g.label != "bench-g0" || newGroup("", sent).label != queueModeLabel {
		t.Errorf("labels %q %q", g.label, newGroup("", sent).label)
	}
}

func TestPopURI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		queue, group string
		autoAck      bool
		wantPath     string
		wantQuery    url.Values
	}{
		{"bench-1", "bench-g0", false, "/api/v1/pop/queue/bench-1",
			url.Values{"batch": {"100"}, "wait": {"true"}, "timeout": {"1000"}, "consumerGroup": {"bench-g0"}}},
		{"a b/c", "", true, "/api/v1/pop/queue/a%20b%2Fc",
			url.Values{"batch": {"100"}, "wait": {"true"}, "timeout": {"1000"}, "autoAck": {"true"}}},
	}
	for _, tt := range tests {
		uri := popURI("http://127.0.0.1:1", tt.queue, tt.group, 100, tt.autoAck)
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		if u.EscapedPath() != tt.wantPath {
			t.Errorf("%s: path %s, want %s", uri, u.EscapedPath(), tt.wantPath)
		}
		if got := u.Query(); got.Encode() != tt.wantQuery.Encode() {
			t.Errorf("%s: query %v, want %v", uri, got, tt.wantQuery)
		}
	}
}

func TestGroupNames(t *testing.T) {
	t.Parallel()
	if got := (Config{Groups: 3}).groupNames(); strings.Join(got, ",") != "bench-g0,bench-g1,bench-g2" {
		t.Errorf("named: %q", got)
	}
	if got := (Config{Groups: 3, QueueMode: true}).groupNames(); len(got) != 1 || got[0] != "" {
		t.Errorf("queue mode: %q", got)
	}
}

func TestCheckStampedLedger(t *testing.T) {
	t.Parallel()
	l, _ := perfect()
	l.Batch = 2
	l.SentAt = [][]int64{{10, 20, 30}, {11, 21, 31}}
	if got := l.sentAt(1, 3); got != 21 {
		t.Fatalf("sentAt(1, 3) = %d, want 21", got)
	}
	var msgs []pg.StoredMessage
	next := map[string]int64{}
	for seq := range 6 {
		for p := range 2 {
			m := stored(l, p, seq, 0)
			m.Offset = next[m.Partition]
			next[m.Partition]++
			msgs = append(msgs, m)
		}
	}
	if v := check(l, msgs); !v.OK() {
		t.Fatalf("stamped: %q", v.Problems)
	}
	msgs[3].Payload = appendPayload(nil, 1, 1, l.shape(), 99)
	if v := check(l, msgs); v.PayloadMismatch != 1 {
		t.Errorf("wrong send time: PayloadMismatch = %d", v.PayloadMismatch)
	}
}

func TestConsumeReportText(t *testing.T) {
	t.Parallel()
	l, msgs := perfect()
	ok := checkGroup("bench-g0", l, deliveriesOf(msgs, l.RunID), false)
	bad := checkGroup("bench-g1", l, deliveriesOf(msgs, l.RunID)[1:], false)
	c := &ConsumeReport{ConsumersPerGroup: 2, PopBatch: 100, DrainTimeoutSec: 60, Delivered: 23, MsgPerSec: 11.5,
		E2ELatency:   LatencySummary{P50ms: 1.5, P999ms: 9},
		Groups:       []GroupReport{{Name: "bench-g0", Delivered: 12, Check: ok}, {Name: "bench-g1", Delivered: 11, Check: bad}},
		ErrorSamples: map[string]int64{"pop: HTTP 503: x": 2}}
	if c.OK() {
		t.Error("OK() with a failed group")
	}
	r := newReport(Config{}.withDefaults(time.Unix(1, 0)), time.Second, &counts{}, &Latency{})
	var plain bytes.Buffer
	if err := r.WriteText(&plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "consume") {
		t.Errorf("report without consumers mentions them:\n%s", plain.String())
	}
	r.Consume = c
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), plain.String()[:strings.Index(plain.String(), "| broker peak RSS")]) {
		t.Errorf("the producer table changed with consumers:\n%s", text.String())
	}
	for _, want := range []string{"2 per group × 2 group(s) [bench-g0, bench-g1]", "| e2e latency p99.9", "9.000 ms |",
		"| bench-g1 |", "FAILED (1)", "consumer errors by kind", "pop: HTTP 503: x",
		"consume verify bench-g0: OK", "consume verify bench-g1: FAILED", "1 items answered queued/buffered but never delivered"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("json: %v", err)
	}
}

// TestSameID: an ack result's transactionId text matches the acked id
// written plainly or with escapes, and nothing else.
func TestSameID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw, id string
		want    bool
	}{
		{`"r1-0-5"`, "r1-0-5", true},
		{`"a\u003cb"`, "a<b", true},
		{`"a\"b"`, `a"b`, true},
		{`"r1-0-6"`, "r1-0-5", false},
		{`""`, "", true},
		{``, "", false},
		{`null`, "", false},
		{`5`, "5", false},
		{`"r1-0-5`, "r1-0-5", false},
	} {
		if got := sameID(json.RawMessage(c.raw), c.id); got != c.want {
			t.Errorf("sameID(%s, %q) = %v, want %v", c.raw, c.id, got, c.want)
		}
	}
}

// TestGroupRecordChunks: deliveries recorded in pops of any size, across
// chunk boundaries, come back whole and in the order received.
func TestGroupRecordChunks(t *testing.T) {
	t.Parallel()
	sent := []*atomic.Int64{new(atomic.Int64)}
	g := newGroup("g", sent)
	var want []delivery
	seq := int64(0)
	for _, n := range []int{1, 999, deliveryChunk - 1000, 1, 2*deliveryChunk + 5, 0, 77} {
		ds := make([]delivery, n)
		for i := range ds {
			ds[i] = delivery{producer: 0, seq: seq, offset: seq}
			seq++
		}
		g.record(ds, time.Now())
		want = append(want, ds...)
	}
	got := g.all()
	if !slices.Equal(got, want) {
		t.Fatalf("%d deliveries back, want %d in order", len(got), len(want))
	}
	for i, c := range g.deliveries {
		if cap(c) != deliveryChunk || (i < len(g.deliveries)-1 && len(c) != deliveryChunk) {
			t.Errorf("chunk %d: len %d cap %d", i, len(c), cap(c))
		}
	}
}
