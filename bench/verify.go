package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// verifyPollEvery is how often Verify re-reads the queue while items are
// still missing.
const verifyPollEvery = 500 * time.Millisecond

// maxProblemLines bounds the problems listed one by one; the counts in
// VerifyResult cover all of them.
const maxProblemLines = 50

// Reader reads a queue back; *pg.Store is one.
type Reader interface {
	ReadQueue(ctx context.Context, queue string) ([]pg.StoredMessage, error)
}

// VerifyResult is what Verify found. The counts are of items of the run.
type VerifyResult struct {
	// Stored is the number of the run's messages found stored.
	Stored int `json:"stored"`
	// Expected is the number of items answered queued or buffered.
	Expected int `json:"expected"`
	// UnknownStored is how many items without an answer (request errors)
	// were stored anyway; not a problem.
	UnknownStored int `json:"unknown_stored"`
	// WaitedSec is how long Verify waited for missing items.
	WaitedSec float64 `json:"waited_s"`

	Missing          int `json:"missing"`           // answered queued/buffered, not stored
	StoredTwice      int `json:"stored_twice"`      // stored more than once
	FailedStored     int `json:"failed_stored"`     // answered failed, stored
	DuplicateVerdict int `json:"duplicate_verdict"` // answered duplicate (never repeated)
	OutOfOrder       int `json:"out_of_order"`      // producer order broken in a partition
	WrongPartition   int `json:"wrong_partition"`   // stored in another partition
	PayloadMismatch  int `json:"payload_mismatch"`  // payload bytes differ
	NeverSent        int `json:"never_sent"`        // run's id, but no such item sent
	// WrongTransactionID: a run with minted ids stored a transactionId
	// other than the message id (the rule for an item without one).
	WrongTransactionID int `json:"wrong_transaction_id"`

	// Problems describes up to maxProblemLines problems, one per line.
	Problems []string `json:"problems,omitempty"`
}

// OK reports whether no problem was found.
func (v *VerifyResult) OK() bool {
	return v.Missing+v.StoredTwice+v.FailedStored+v.DuplicateVerdict+v.OutOfOrder+
		v.WrongPartition+v.PayloadMismatch+v.NeverSent+v.WrongTransactionID == 0
}

func (v *VerifyResult) problem(counter *int, format string, a ...any) {
	*counter++
	if len(v.Problems) < maxProblemLines {
		v.Problems = append(v.Problems, fmt.Sprintf(format, a...))
	}
}

func (v *VerifyResult) writeText(w io.Writer) {
	if v.OK() {
		fmt.Fprintf(w, "verify: OK stored=%d (expected %d, unanswered but stored %d, waited %.1f s)\n",
			v.Stored, v.Expected, v.UnknownStored, v.WaitedSec)
		return
	}
	fmt.Fprintf(w, "verify: FAILED stored=%d expected=%d waited=%.1fs\n", v.Stored, v.Expected, v.WaitedSec)
	writeProblems(w, []problemKind{
		{v.Missing, "answered queued/buffered but not stored"},
		{v.StoredTwice, "stored more than once"},
		{v.FailedStored, "answered failed but stored"},
		{v.DuplicateVerdict, "answered duplicate though never repeated"},
		{v.OutOfOrder, "stored out of producer order"},
		{v.WrongPartition, "stored in the wrong partition"},
		{v.PayloadMismatch, "stored with a different payload"},
		{v.NeverSent, "stored with this run's id but never sent"},
		{v.WrongTransactionID, "stored with a transactionId other than the minted message id"},
	}, v.Problems)
}

// Verify reads l's queue through src until every item answered queued or
// buffered is stored, or timeout passes, then checks the rules in the
// package documentation. The error is for a queue that could not be read
// (the last read error, once timeout has passed); problems with the
// messages are in the result.
func Verify(ctx context.Context, src Reader, l *Ledger, timeout time.Duration) (*VerifyResult, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	t := time.NewTicker(verifyPollEvery)
	defer t.Stop()
	for {
		msgs, err := src.ReadQueue(ctx, l.Queue)
		var res *VerifyResult
		if err == nil {
			res = check(l, msgs)
			if res.Missing == 0 || !time.Now().Before(deadline) {
				res.WaitedSec = time.Since(start).Seconds()
				return res, nil
			}
		} else if !time.Now().Before(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("bench: read queue %s: %w", l.Queue, err)
		}
		select {
		case <-ctx.Done():
			if res != nil {
				res.WaitedSec = time.Since(start).Seconds()
				return res, nil
			}
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// txidString formats a transactionId only when a problem prints it.
type txidString struct {
	run    string
	p, seq int
}

func (t txidString) String() string { return string(appendTxID(nil, t.run, t.p, t.seq)) }

// check applies the rules to one read of the queue.
func check(l *Ledger, msgs []pg.StoredMessage) *VerifyResult {
	v := &VerifyResult{}
	seen := make([][]uint8, len(l.Outcomes)) // stored copies, saturating
	for p := range l.Outcomes {
		seen[p] = make([]uint8, len(l.Outcomes[p]))
	}

	ids := l.ids()
	// Offset order within each partition, whatever order src returned.
	ours := make([]int, 0, len(msgs))
	for i := range msgs {
		if _, _, mine, _ := ids.identify(msgs[i].TransactionID, msgs[i].Payload); mine {
			ours = append(ours, i)
		}
	}
	slices.SortFunc(ours, func(a, b int) int {
		return cmp.Or(cmp.Compare(msgs[a].Partition, msgs[b].Partition), cmp.Compare(msgs[a].Offset, msgs[b].Offset))
	})

	type lastKey struct {
		partition string
		producer  int
	}
	last := make(map[lastKey][2]int64) // → seq, offset of the producer's previous message there
	var want, part []byte
	for _, i := range ours {
		m := &msgs[i]
		v.Stored++
		p, seq, _, ok := ids.identify(m.TransactionID, m.Payload)
		if !ok || p >= len(l.Outcomes) || seq >= len(l.Outcomes[p]) {
			v.problem(&v.NeverSent, "%s offset %d: transactionId %q (payload %.30q) was never sent", m.Partition, m.Offset,
				m.TransactionID, m.Payload)
			continue
		}
		if ids.minted && m.TransactionID != m.ID.String() {
			v.problem(&v.WrongTransactionID, "%s offset %d: transactionId %q is not the minted message id %s", m.Partition,
				m.Offset, m.TransactionID, m.ID)
		}
		if seen[p][seq] < 255 {
			seen[p][seq]++
		}
		part = appendPartition(part[:0], l.partitionOf(p, seq))
		if m.Partition != string(part) {
			v.problem(&v.WrongPartition, "%s offset %d: %q was sent to partition %s", m.Partition, m.Offset, m.TransactionID, part)
		}
		want = appendPayload(want[:0], p, seq, l.shape(), l.sentAt(p, seq))
		if !bytes.Equal(m.Payload, want) {
			v.problem(&v.PayloadMismatch, "%s offset %d: %q payload differs: stored %d bytes %.60q…", m.Partition, m.Offset,
				m.TransactionID, len(m.Payload), m.Payload)
		}
		k := lastKey{m.Partition, p}
		if prev, ok := last[k]; ok && int64(seq) <= prev[0] {
			v.problem(&v.OutOfOrder, "%s: producer %d seq %d at offset %d comes after seq %d at offset %d",
				m.Partition, p, seq, m.Offset, prev[0], prev[1])
		}
		last[k] = [2]int64{int64(seq), m.Offset}
	}

	for p, outs := range l.Outcomes {
		for seq, o := range outs {
			n := int(seen[p][seq])
			txid := txidString{l.RunID, p, seq}
			if n > 1 {
				v.problem(&v.StoredTwice, "%s (answered %s) stored %d times", txid, o, n)
			}
			switch o {
			case Queued, Buffered:
				v.Expected++
				if n == 0 {
					v.problem(&v.Missing, "%s answered %s, not stored", txid, o)
				}
			case Failed:
				if n > 0 {
					v.problem(&v.FailedStored, "%s answered failed, stored", txid)
				}
			case Duplicate:
				v.problem(&v.DuplicateVerdict, "%s answered duplicate though sent once (stored %d times)", txid, n)
			case Unknown:
				if n > 0 {
					v.UnknownStored++
				}
			}
		}
	}
	return v
}

// problemKind is one counted kind of verification problem.
type problemKind struct {
	n    int
	what string
}

// writeProblems prints the non-zero counts, the sampled problem lines, and
// how many problems the sample left out.
func writeProblems(w io.Writer, kinds []problemKind, sample []string) {
	total := 0
	for _, k := range kinds {
		total += k.n
		if k.n > 0 {
			fmt.Fprintf(w, "  %d items %s\n", k.n, k.what)
		}
	}
	for _, p := range sample {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	if total > len(sample) {
		fmt.Fprintf(w, "  … %d more\n", total-len(sample))
	}
}
