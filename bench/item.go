package bench

import (
	"strconv"
	"strings"
)

// Outcome is what became of one item, as far as the client knows.
type Outcome uint8

// Outcomes. The zero value is Unknown.
const (
	// Unknown: the item's request got no usable answer.
	Unknown Outcome = iota
	Queued
	Duplicate
	Buffered
	Failed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"unknown", "queued", "duplicate", "buffered", "failed"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// parseStatus maps a push response status to an Outcome; ok is false for a
// status the protocol does not define.
func parseStatus(s string) (Outcome, bool) {
	switch s {
	case "queued":
		return Queued, true
	case "duplicate":
		return Duplicate, true
	case "buffered":
		return Buffered, true
	case "failed":
		return Failed, true
	}
	return Unknown, false
}

// Ledger records every item a run sent and its outcome, for Verify.
type Ledger struct {
	RunID        string
	Queue        string
	Partitions   int
	PayloadBytes int
	// Outcomes[p][seq] is the outcome of producer p's item seq; len
	// (Outcomes[p]) is the number of items p sent.
	Outcomes [][]Outcome
}

// partitionIndex is the partition item seq of producer p is sent to.
func partitionIndex(p, seq, partitions int) int { return (p + seq) % partitions }

func appendPartition(dst []byte, i int) []byte {
	return strconv.AppendInt(append(dst, 'p'), int64(i), 10)
}

func appendTxID(dst []byte, run string, p, seq int) []byte {
	dst = append(dst, run...)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, int64(seq), 10)
}

// parseTxID splits a transactionId of run into producer and sequence
// number. ours is false for an id of another run or of no run; ok is false
// for an id with the run's prefix that does not parse.
func parseTxID(run, txid string) (p, seq int, ours, ok bool) {
	rest, found := strings.CutPrefix(txid, run+"-")
	if !found {
		return 0, 0, false, false
	}
	ps, ss, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, true, false
	}
	p, err1 := strconv.Atoi(ps)
	seq, err2 := strconv.Atoi(ss)
	if err1 != nil || err2 != nil || p < 0 || seq < 0 {
		return 0, 0, true, false
	}
	return p, seq, true, true
}

// appendPayload appends item seq of producer p's payload, a JSON object of
// size bytes (more only when the fixed part alone is longer).
func appendPayload(dst []byte, p, seq, size int) []byte {
	start := len(dst)
	dst = append(dst, `{"p":`...)
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"pad":"`...)
	for n := size - (len(dst) - start) - 2; n > 0; n-- {
		dst = append(dst, 'x')
	}
	return append(dst, `"}`...)
}
