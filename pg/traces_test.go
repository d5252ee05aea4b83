package pg_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/pg"
)

// listedTrace is a trace the listing test stored: its data (which tells it
// apart) and its weight as pg.TraceListing counts it.
type listedTrace struct {
	pid    uuid.UUID
	data   string
	weight int64
}

// fitModel is TraceListing's rule, written as a loop: how many of ws (the
// weights in the listing's order) one listing takes.
func fitModel(ws []int64, limit int, budget int64) int {
	var sum int64
	n := 0
	for _, w := range ws {
		if n == limit || (n > 0 && sum+w > budget) {
			break
		}
		sum += w
		n++
	}
	return n
}

// TestTraceListingEdges: MessageTraces and TracesByName take exactly what
// TraceListing's rule takes, for every row cap and for budgets at each
// running sum of the listing's weights and one byte either side of it (a
// trace that ends exactly at the budget is in, one byte more is out; the
// first trace is in whatever its size), and answer the right rows in the
// right order: the newest of a message, oldest first, with more exactly
// when older ones were left out; a by-name page from offset, with the
// total, its queue and partition names, and no other trace. TraceNames
// pages the names most recently seen first (ties by name) with their
// counts, and its count comes with an empty page too.
func TestTraceListingEdges(t *testing.T) {
	s := openStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := s.Pool()
	part := func(queue, name string) uuid.UUID {
		var qid, pid uuid.UUID
		if err := db.QueryRow(ctx, `INSERT INTO queen.queues (name) VALUES ($1) RETURNING id`, queue).Scan(&qid); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(ctx, `INSERT INTO queen.partitions (queue_id, name) VALUES ($1, $2) RETURNING id`,
			qid, name).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	p1, p2 := part("qa", "pa"), part("qb", "pb")
	// insert stores a trace (straight into the table, so that any size
	// goes) and returns it with its weight: data, transactionId twice,
	// group, event type, names and 4 bytes a name, plus 1 KiB.
	insert := func(pid uuid.UUID, txid string, dataBytes int, tag string, names []string) listedTrace {
		data := []byte(fmt.Sprintf("%q", tag))
		data = append(data, bytes.Repeat([]byte(" "), dataBytes-len(data))...)
		if _, err := db.Exec(ctx, `INSERT INTO queen.message_traces
			(partition_id, transaction_id, message_id, msg_offset, consumer_group, event_type, data, trace_names)
			VALUES ($1, $2, $3, 0, 'grp', 'ev', $4, $5)`, pid, []byte(txid), uuid.New(), data, names); err != nil {
			t.Fatal(err)
		}
		w := int64(len(data) + 2*len(txid) + len("grp") + len("ev") + 1024)
		for _, n := range names {
			w += int64(len(n)) + 4
		}
		return listedTrace{pid, string(data), w}
	}
	// One message's traces, the others interleaved with them: two other
	// messages in the same partition, the same transactionId in another
	// partition. Every trace of p1/"tx" and of p2 carries "nm".
	sizes := []int{10, 300, 5000, 20, 70000, 10, 2000, 64 << 10, 40}
	var msg, named []listedTrace
	for i, sz := range sizes {
		tr := insert(p1, "tx", sz, fmt.Sprintf("m%d", i), []string{"nm"})
		msg, named = append(msg, tr), append(named, tr)
		insert(p1, fmt.Sprintf("other%d", i%2), 50, fmt.Sprintf("o%d", i), []string{"else"})
		if i%3 == 0 {
			named = append(named, insert(p2, "tx", 100*i+10, fmt.Sprintf("p%d", i), []string{"a", "nm", "z"}))
		}
	}
	// budgets returns, for weights ws in a listing's order, each running
	// sum and one byte either side, and the extremes.
	budgets := func(ws []int64) []int64 {
		out := []int64{-1, 0, math.MaxInt64}
		var sum int64
		for _, w := range ws {
			sum += w
			out = append(out, sum-1, sum, sum+1)
		}
		return out
	}

	newestFirst := make([]int64, len(msg))
	for i := range msg {
		newestFirst[i] = msg[len(msg)-1-i].weight
	}
	for limit := 1; limit <= len(msg)+1; limit++ {
		for _, budget := range budgets(newestFirst) {
			l := pg.TraceListing{Limit: limit, Budget: budget}
			got, more, err := s.MessageTraces(ctx, p1, "tx", l)
			if err != nil {
				t.Fatal(err)
			}
			n := fitModel(newestFirst, limit, budget)
			want := msg[len(msg)-n:]
			if len(got) != n || more != (n < len(msg)) {
				t.Fatalf("message traces %+v: %d traces, more %v; want %d, more %v", l, len(got), more, n, n < len(msg))
			}
			for i := range got {
				if string(got[i].Data) != want[i].data || got[i].PartitionID != p1 || got[i].TransactionID != "tx" {
					t.Fatalf("message traces %+v: trace %d is %q of %s/%s, want %q", l, i, got[i].Data[:4],
						got[i].PartitionID, got[i].TransactionID, want[i].data[:4])
				}
			}
		}
	}
	if got, more, err := s.MessageTraces(ctx, p2, "nope", pg.TraceListing{Limit: 10, Budget: 1 << 20}); err != nil || more || got != nil {
		t.Fatalf("unknown message: %d traces, more %v, %v; want nil, false, nil", len(got), more, err)
	}

	weights := make([]int64, len(named))
	for i := range named {
		weights[i] = named[i].weight
	}
	for offset := 0; offset <= len(named)+1; offset++ {
		var rest []int64
		if offset < len(named) {
			rest = weights[offset:]
		}
		for limit := 1; limit <= len(rest)+1; limit++ {
			for _, budget := range budgets(rest) {
				l := pg.TraceListing{Limit: limit, Budget: budget}
				got, total, err := s.TracesByName(ctx, "nm", offset, l)
				if err != nil {
					t.Fatal(err)
				}
				n := fitModel(rest, limit, budget)
				if total != int64(len(named)) || len(got) != n || n == 0 && got != nil {
					t.Fatalf("by name offset %d %+v: %d traces, total %d; want %d, total %d", offset, l, len(got), total, n, len(named))
				}
				for i := range got {
					w := named[offset+i]
					q, p := "qa", "pa"
					if w.pid == p2 {
						q, p = "qb", "pb"
					}
					if string(got[i].Data) != w.data || got[i].PartitionID != w.pid || got[i].Queue != q || got[i].Partition != p {
						t.Fatalf("by name offset %d %+v: trace %d is %q in %s/%s, want %q in %s/%s", offset, l, i,
							got[i].Data[:4], got[i].Queue, got[i].Partition, w.data[:4], q, p)
					}
				}
			}
		}
	}
	// Paging by what each page held visits every trace once.
	var seen []string
	for offset := 0; offset < len(named); {
		got, _, err := s.TracesByName(ctx, "nm", offset, pg.TraceListing{Limit: 1000, Budget: 70 << 10})
		if err != nil || len(got) == 0 {
			t.Fatalf("by name offset %d: %d traces, %v", offset, len(got), err)
		}
		for _, tr := range got {
			seen = append(seen, string(tr.Data))
		}
		offset += len(got)
	}
	for i := range named {
		if i >= len(seen) || seen[i] != named[i].data {
			t.Fatalf("paging: %d traces seen, trace %d differs", len(seen), i)
		}
	}
	if got, total, err := s.TracesByName(ctx, "unused", 0, pg.TraceListing{Limit: 10, Budget: 1 << 20}); err != nil || total != 0 || got != nil {
		t.Fatalf("unused name: %d traces, total %d, %v", len(got), total, err)
	}
	if _, _, err := s.TracesByName(ctx, "nm", -1, pg.TraceListing{Limit: 10, Budget: 1 << 20}); err == nil {
		t.Fatal("negative offset: no error")
	}

	// The names, most recently seen first: "else" and "nm" were last
	// recorded at i = 8 ("nm" first), "a" and "z" on one row at i = 6
	// (the tie goes by name).
	names := []pg.TraceNameSummary{{Name: "else", TraceCount: 9, MessageCount: 2},
		{Name: "nm", TraceCount: int64(len(named)), MessageCount: 2},
		{Name: "a", TraceCount: 3, MessageCount: 1}, {Name: "z", TraceCount: 3, MessageCount: 1}}
	for offset := 0; offset <= len(names)+1; offset++ {
		for limit := 0; limit <= len(names)+1; limit++ {
			got, total, err := s.TraceNames(ctx, limit, offset)
			want := names[min(offset, len(names)):min(offset+limit, len(names))]
			if err != nil || total != int64(len(names)) || len(got) != len(want) || got == nil {
				t.Fatalf("names limit %d offset %d: %+v, total %d, %v; want %d names, total %d", limit, offset, got, total, err,
					len(want), len(names))
			}
			for i := range got {
				if g := got[i]; g.Name != want[i].Name || g.TraceCount != want[i].TraceCount || g.MessageCount != want[i].MessageCount ||
					g.LastSeen.IsZero() || i > 0 && g.LastSeen.After(got[i-1].LastSeen) {
					t.Fatalf("names limit %d offset %d: name %d is %+v, want %+v", limit, offset, i, g, want[i])
				}
			}
		}
	}
	if _, _, err := s.TraceNames(ctx, 10, -1); err == nil {
		t.Fatal("names, negative offset: no error")
	}
	if _, err := db.Exec(ctx, `DELETE FROM queen.message_traces`); err != nil {
		t.Fatal(err)
	}
	if got, total, err := s.TraceNames(ctx, 10, 0); err != nil || total != 0 || got == nil || len(got) != 0 {
		t.Fatalf("names of no traces: %+v, total %d, %v", got, total, err)
	}
}
