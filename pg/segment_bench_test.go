package pg

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/benchcpu"
)

// benchItems is a projector batch as the 8 × 100 bench produces it: n
// items of 256-byte payloads over parts partitions, client transactionIds
// (or minted ids, the id's text, with minted).
func benchItems(n, parts int, minted bool) ([]ProjectItem, []uuid.UUID) {
	items := make([]ProjectItem, n)
	ids := make([]uuid.UUID, n)
	pids := make([]uuid.UUID, parts)
	for i := range pids {
		pids[i] = uuid.New()
	}
	payload := []byte(`{"p":"` + fmt.Sprintf("%0248d", 0) + `"}`)
	for i := range items {
		id, _ := uuid.NewV7()
		tx := fmt.Sprintf("r1bench-%d-%d", i%8, i)
		if minted {
			tx = id.String()
		}
		at := int64(1_700_000_000_000_000 + i)
		// A minted id is marked as the push path marks it (ingest).
		items[i] = ProjectItem{Queue: "bench", Partition: fmt.Sprintf("p%d", i%parts), AcceptedAtMicros: at,
			Message: Message{ID: id, TransactionID: tx, CreatedAtMicros: at, Payload: payload, MintedTxID: minted}}
		ids[i] = pids[i%parts]
	}
	return items, ids
}

// BenchmarkEncodeSegment: one partition's segment body of a 400-item batch
// over 10 partitions (40 messages).
func BenchmarkEncodeSegment(b *testing.B) {
	items, _ := benchItems(40, 1, false)
	msgs := make([]Message, len(items))
	for i := range items {
		msgs[i] = items[i].Message
	}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = EncodeSegment(buf[:0], msgs)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkSegmentCompress: storing (storeSegment, compression on) and
// reading back (plainSegment) one partition's segment of 100 messages of
// 256-byte payloads with minted ids, as 8 × 100 over 10 partitions makes
// it: payloads of one repeated character (which compress) and of random
// base64url text (which do not, and are stored as they are); ratio is
// stored bytes over plain bytes.
func BenchmarkSegmentCompress(b *testing.B) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for _, random := range []bool{false, true} {
		items, _ := benchItems(100, 1, true)
		msgs := make([]Message, len(items))
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range items {
			msgs[i] = items[i].Message
			if random {
				p := []byte(`{"p":"`)
				for range 248 {
					p = append(p, alphabet[rng.IntN(len(alphabet))])
				}
				msgs[i].Payload = append(p, `"}`...)
			}
		}
		plain := EncodeSegment(nil, msgs)
		stored := storeSegment(nil, plain, len(msgs), msgs[0].CreatedAtMicros)
		b.Run(fmt.Sprintf("random=%v/store", random), func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				buf = storeSegment(buf[:0], plain, len(msgs), msgs[0].CreatedAtMicros)
			}
			b.ReportMetric(float64(len(buf))/float64(len(plain)), "ratio")
		})
		b.Run(fmt.Sprintf("random=%v/read", random), func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := plainSegment(stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProjectBuild is the Go side of one Project batch before and
// after its SQL: 800 items (8 pushes × 100) over 10 partitions, decided
// against an empty probe result, then the segments and sidecar rows built.
func BenchmarkProjectBuild(b *testing.B) {
	for _, minted := range []bool{false, true} {
		b.Run(fmt.Sprintf("minted=%v", minted), func(b *testing.B) {
			items, ids := benchItems(800, 10, minted)
			s := &Store{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				parts := make(map[uuid.UUID]*partState)
				var lockIDs []uuid.UUID
				for _, id := range ids {
					if _, ok := parts[id]; !ok {
						parts[id] = &partState{id: id, window: 3600e6}
						lockIDs = append(lockIDs, id)
					}
				}
				known := make(map[dedupKey]*dedupEntry)
				for j := range items {
					known[dedupKey{ids[j], items[j].Message.TransactionID}] = nil
				}
				back := getBatchMsgs(len(items)) // as projectTx does
				decide(items, ids, parts, known, *back)
				if _, err := s.buildWrites(lockIDs, parts); err != nil {
					b.Fatal(err)
				}
				putBatchMsgs(back)
			}
		})
	}
}

// popSegments are the segment bodies a pop of the bench's deep queue
// reads: 1,000 messages of 256-byte payloads in segments of 80 (one
// projector batch of 8 × 100 over 10 partitions), client transactionIds.
func popSegments() (pid uuid.UUID, bases []int64, bodies [][]byte) {
	items, _ := benchItems(1000, 1, false)
	pid = uuid.New()
	for base := 0; base < len(items); base += 80 {
		msgs := make([]Message, 0, 80)
		for i := base; i < min(base+80, len(items)); i++ {
			msgs = append(msgs, items[i].Message)
		}
		bases = append(bases, int64(base))
		bodies = append(bodies, EncodeSegment(nil, msgs))
	}
	return pid, bases, bodies
}

// BenchmarkPopDecode decodes what one pop of batch 100 delivers from a
// cursor in the middle of a segment (offsets 530..629: the tail of one
// segment, one whole and the head of the next), as the pop path does
// with the rows its claim statement returns; per message: ns/op / 100.
func BenchmarkPopDecode(b *testing.B) {
	pid, bases, bodies := popSegments()
	const from, to = 530, 629
	var out []StoredMessage
	b.ReportAllocs()
	defer benchcpu.Report(b)()
	for b.Loop() {
		out = out[:0]
		for i, base := range bases {
			last := base + 79
			if last < from || base > to {
				continue
			}
			var err error
			if out, err = appendSegmentOffsets(out, pid, base, last, bodies[i], from, to); err != nil {
				b.Fatal(err)
			}
		}
		if len(out) != 100 {
			b.Fatalf("decoded %d messages", len(out))
		}
	}
}

// BenchmarkProjectPredicted is the Go side of one batch written the one
// round trip way (buildPredicted: the batch's keys checked, every item
// stored, the segments and the sidecar row built), 800 items (8 pushes ×
// 100) over 10 partitions whose next offsets are known, with an empty
// tick cache: broker-minted ids, client transactionIds as plain text, and
// client transactionIds as UUIDv7 text minted as the batch is accepted
// (what Queen's SDKs send; their keys go under their tick). ns/op / 800
// is the broker CPU per message this part of projection costs.
func BenchmarkProjectPredicted(b *testing.B) {
	for _, kind := range []string{"minted", "client-text", "client-uuid7"} {
		b.Run(kind, func(b *testing.B) {
			items, ids := benchItems(800, 10, kind == "minted")
			if kind == "client-uuid7" {
				at := time.Now().UnixMicro()
				for i := range items {
					u, _ := uuid.NewV7()
					items[i].Message.TransactionID = u.String()
					items[i].Message.CreatedAtMicros, items[i].AcceptedAtMicros = at, at
				}
			}
			s := &Store{}
			b.ReportAllocs()
			defer benchcpu.Report(b)()
			for i := 0; i < b.N; i++ {
				parts, lockIDs := predictedParts(ids, 100)
				back := getBatchMsgs(len(items)) // as projectPredicted does
				_, w, err := s.buildPredicted(items, ids, lockIDs, parts, false, *back)
				if err != nil {
					b.Fatal(err)
				}
				w.release()
				putBatchMsgs(back)
			}
		})
	}
}
