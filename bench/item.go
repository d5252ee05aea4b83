package bench

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/google/uuid"
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
	// RandomPayload: the payloads were padded with random characters
	// (see payloadShape).
	RandomPayload bool
	// MintedIDs: the items carried no transactionId; the broker minted
	// each one's (its message id) and messages are traced by payload.
	MintedIDs bool
	// UUID7IDs: the client transactionIds were UUIDv7 text
	// (appendUUID7TxID), not "<run>-<p>-<seq>".
	UUID7IDs bool
	// Outcomes[p][seq] is the outcome of producer p's item seq; len
	// (Outcomes[p]) is the number of items p sent.
	Outcomes [][]Outcome
	// Batch is the number of items per request.
	Batch int
	// FreshPartitions: every item went to a partition of its own, not
	// used before (see Config.FreshPartitions).
	FreshPartitions bool
	// SentAt[p][i] is when producer p sent its request i (items i·Batch …
	// (i+1)·Batch-1), in unix nanoseconds: the send time the payloads of
	// that request carry. Nil for runs without consumers, whose payloads
	// carry no send time.
	SentAt [][]int64
}

func (l *Ledger) ids() itemIDs { return itemIDs{run: l.RunID, minted: l.MintedIDs, uuid7: l.UUID7IDs} }

func (l *Ledger) shape() payloadShape {
	return payloadShape{bytes: l.PayloadBytes, random: l.RandomPayload}
}

// sentAt is the send time item seq of producer p carries, noStamp when
// payloads carry none.
func (l *Ledger) sentAt(p, seq int) int64 {
	if l.SentAt == nil || l.Batch <= 0 || p >= len(l.SentAt) || seq/l.Batch >= len(l.SentAt[p]) {
		return noStamp
	}
	return l.SentAt[p][seq/l.Batch]
}

// expected reports whether item seq of producer p must reach every
// consumer group: it was answered queued or buffered.
func (l *Ledger) expected(p, seq int) bool {
	if p >= len(l.Outcomes) || seq >= len(l.Outcomes[p]) {
		return false
	}
	o := l.Outcomes[p][seq]
	return o == Queued || o == Buffered
}

// partitionIndex is the partition item seq of producer p is sent to.
func partitionIndex(p, seq, partitions int) int { return (p + seq) % partitions }

// freshPartitionIndex is the partition item seq of producer p (of
// producers) is sent to in a run with fresh partitions: one per item,
// numbered from partitions up, so that p0…p<partitions-1> (pre-built ones)
// are never reused.
func freshPartitionIndex(p, seq, producers, partitions int) int {
	return partitions + seq*producers + p
}

// partitionOf is the partition index item seq of producer p was sent to.
func (l *Ledger) partitionOf(p, seq int) int {
	if l.FreshPartitions {
		return freshPartitionIndex(p, seq, len(l.Outcomes), l.Partitions)
	}
	return partitionIndex(p, seq, l.Partitions)
}

func appendPartition(dst []byte, i int) []byte {
	return strconv.AppendInt(append(dst, 'p'), int64(i), 10)
}

// parsePartition is the index of partition name "p<i>", -1 for a name
// the run does not use.
func parsePartition(name string) int {
	rest, ok := strings.CutPrefix(name, "p")
	if !ok || rest == "" || rest[0] == '+' || rest[0] == '-' || (len(rest) > 1 && rest[0] == '0') {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return i
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

// maxUUID7Producers is the most producers a run with UUIDv7
// transactionIds has: appendUUID7TxID keeps 16 bits for the producer.
const maxUUID7Producers = 1<<16 - 1

// uuid7Tag is run's 12-bit tag in its UUIDv7 transactionIds (FNV-1a of
// the run id), so that ids of other runs are told apart.
func uuid7Tag(run string) uint16 {
	h := uint32(2166136261)
	for i := 0; i < len(run); i++ {
		h = (h ^ uint32(run[i])) * 16777619
	}
	return uint16(h & 0xfff)
}

// appendUUID7TxID appends item seq of producer p's transactionId in the
// form Queen's SDKs send: the lowercase canonical text of a version-7
// UUID whose 48-bit time is ms (Unix milliseconds: when the item is
// built, as an SDK mints it), whose 12 bits rand_a are the run's tag
// (uuid7Tag) and whose 62 bits rand_b hold p (16 bits, bytes 10-11) and
// seq (32 bits, bytes 12-15) behind the variant bits, so that parseUUID7TxID
// reads them back. The id is unique per (run, p, seq) but not random:
// the broker must not rely on randomness, and keys hash it anyway.
func appendUUID7TxID(dst []byte, run string, p, seq int, ms int64) []byte {
	var u [16]byte
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	tag := uuid7Tag(run)
	u[6] = 0x70 | byte(tag>>8)
	u[7] = byte(tag)
	u[8] = 0x80
	u[10], u[11] = byte(p>>8), byte(p)
	u[12], u[13], u[14], u[15] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	const hexDigits = "0123456789abcdef"
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	return dst
}

// parseUUID7TxID is parseTxID for run's UUIDv7 transactionIds
// (appendUUID7TxID): ours is false for text that is not a version-7 UUID
// with run's tag.
func parseUUID7TxID(run, txid string) (p, seq int, ours, ok bool) {
	u, err := uuid.Parse(txid)
	if err != nil || len(txid) != 36 || u.Version() != 7 {
		return 0, 0, false, false
	}
	if tag := uuid7Tag(run); u[6]&0x0f != byte(tag>>8) || u[7] != byte(tag) {
		return 0, 0, false, false
	}
	if u[8] != 0x80 || u[9] != 0 || txid != u.String() {
		return 0, 0, true, false
	}
	p = int(u[10])<<8 | int(u[11])
	seq = int(u[12])<<24 | int(u[13])<<16 | int(u[14])<<8 | int(u[15])
	return p, seq, true, true
}

// itemIDs says how a run's messages are traced back to the items sent:
// by the transactionId "<run>-<p>-<seq>" (or its UUIDv7 form, uuid7) the client gave, or, when the
// broker minted the ids (minted), by the producer and sequence number at
// the start of the payload. A minted run's queue holds only its own
// messages (the queue is named after the run), so every message in it is
// the run's.
type itemIDs struct {
	run    string
	minted bool
	uuid7  bool
}

// identify returns the producer and sequence number of a stored or popped
// message; ours and ok as for parseTxID.
func (x itemIDs) identify(txid string, payload []byte) (p, seq int, ours, ok bool) {
	if !x.minted {
		if x.uuid7 {
			return parseUUID7TxID(x.run, txid)
		}
		return parseTxID(x.run, txid)
	}
	p, seq, ok = parsePayloadID(payload)
	return p, seq, true, ok
}

// parsePayloadID reads the producer and sequence number a payload starts
// with ({"p":<p>,"s":<seq>,…); ok is false for any other payload.
func parsePayloadID(b []byte) (p, seq int, ok bool) {
	num := func(prefix string) (int, bool) {
		rest, found := bytes.CutPrefix(b, []byte(prefix))
		if !found {
			return 0, false
		}
		n, i := 0, 0
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' && i < 18 {
			n = n*10 + int(rest[i]-'0')
			i++
		}
		if i == 0 || (i > 1 && rest[0] == '0') || i == len(rest) || rest[i] != ',' {
			return 0, false
		}
		b = rest[i+1:]
		return n, true
	}
	if p, ok = num(`{"p":`); !ok {
		return 0, 0, false
	}
	if seq, ok = num(`"s":`); !ok {
		return 0, 0, false
	}
	return p, seq, true
}

// noStamp is the send time of a payload that carries none.
const noStamp int64 = -1

// stampWidth is the width of a payload's send time: 19 digits hold unix
// nanoseconds from 2001 to 2286; shorter values are padded with leading
// spaces (JSON whitespace), so the payload's size does not depend on it.
const stampWidth = 19

// payloadShape is how a run's payloads are made: their size and what pads
// them to it.
type payloadShape struct {
	// bytes is each payload's size (more only when the fixed part alone
	// is longer).
	bytes int
	// random pads with characters of the base64url alphabet drawn from a
	// generator seeded by the item (producer, sequence number), which
	// LZ4 cannot compress (6 bits of entropy per byte, no repeats), so
	// PostgreSQL stores every byte; false pads with 'x', which compresses
	// about tenfold. Both are deterministic, so Verify and the consumers
	// rebuild the payload and compare it byte for byte.
	random bool
}

// appendPayload appends item seq of producer p's payload, a JSON object of
// shape.bytes bytes (more only when the fixed part alone is longer). A
// payload with a send time (sent >= 0, unix nanoseconds) carries it as "t".
func appendPayload(dst []byte, p, seq int, shape payloadShape, sent int64) []byte {
	dst, _ = appendPayloadAt(dst, p, seq, shape, sent)
	return dst
}

// appendPayloadAt is appendPayload that also returns where in dst the send
// time's stampWidth bytes are (for putStamp), -1 without a send time.
func appendPayloadAt(dst []byte, p, seq int, shape payloadShape, sent int64) ([]byte, int) {
	start := len(dst)
	dst = appendPayloadPrefix(dst, p, seq, sent >= 0)
	at := -1
	if sent >= 0 {
		at = len(dst)
		dst = append(dst, make([]byte, stampWidth)...)
		putStamp(dst[at:], sent)
		dst = append(dst, ',')
	}
	dst = append(dst, `"pad":"`...)
	n := max(shape.bytes-(len(dst)-start)-2, 0)
	if shape.random {
		dst = appendRandomPad(dst, p, seq, n)
	} else {
		for range n {
			dst = append(dst, 'x')
		}
	}
	return append(dst, `"}`...), at
}

// padAlphabet is the characters of a random pad: base64url, none of which
// JSON escapes.
const padAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// appendRandomPad appends n characters of padAlphabet drawn from a PCG
// generator (math/rand/v2) seeded by producer p and sequence number seq:
// the same item always gets the same pad, different items different ones.
func appendRandomPad(dst []byte, p, seq, n int) []byte {
	src := rand.NewPCG(uint64(p), uint64(seq))
	for n > 0 {
		x := src.Uint64()
		// Ten characters of six bits from each draw.
		for i := 0; i < 10 && n > 0; i, n = i+1, n-1 {
			dst = append(dst, padAlphabet[x>>(58-6*i)&63])
		}
	}
	return dst
}

// appendPayloadPrefix appends the payload's bytes before its send time
// (stamped) or before its padding.
func appendPayloadPrefix(dst []byte, p, seq int, stamped bool) []byte {
	dst = append(dst, `{"p":`...)
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	if stamped {
		return append(dst, `,"t":`...)
	}
	return append(dst, ',')
}

// putStamp writes t (>= 0) right-aligned into b, len(b) == stampWidth,
// padding with spaces.
func putStamp(b []byte, t int64) {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], t, 10)
	d = d[max(len(d)-stampWidth, 0):] // past 2286: keep the low digits
	n := copy(b[stampWidth-len(d):], d)
	for i := range stampWidth - n {
		b[i] = ' '
	}
}

// parseStamp reads what putStamp wrote; ok is false for anything else.
func parseStamp(b []byte) (t int64, ok bool) {
	if len(b) != stampWidth {
		return 0, false
	}
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	if i == len(b) {
		return 0, false
	}
	for ; i < len(b); i++ {
		if b[i] < '0' || b[i] > '9' {
			return 0, false
		}
		t = t*10 + int64(b[i]-'0')
	}
	return t, true
}
