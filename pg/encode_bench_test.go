package pg

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// BenchmarkProjectEncode is the broker's whole CPU share of one
// one-round-trip projection batch before the socket write: 800 items (8
// pushes × 100) over 10 partitions checked, stored and built
// (buildPredicted), then every queued statement's arguments encoded as pgx
// encodes them for the extended protocol (binary arrays, each statement's
// parameters into a buffer that starts at 256 bytes) and copied into the
// bind messages of one connection write buffer (pgx's fresh 1 KiB, then
// the batch's reservation in the buffer the connection keeps: sendBatch),
// with the type map of a pool connection (registerFastArrays).
func BenchmarkProjectEncode(b *testing.B) {
	for _, minted := range []bool{false, true} {
		b.Run(fmt.Sprintf("minted=%v", minted), func(b *testing.B) {
			items, ids := benchItems(800, 10, minted)
			m := pgtype.NewMap()
			registerFastArrays(m)
			s := &Store{}
			b.ReportAllocs()
			bytes := 0
			kept := newKeptBuffer()
			for b.Loop() {
				parts := make(map[uuid.UUID]*partState)
				var lockIDs []uuid.UUID
				for _, id := range ids {
					if _, ok := parts[id]; !ok {
						parts[id] = &partState{id: id, window: 3600e6}
						lockIDs = append(lockIDs, id)
					}
				}
				back := getBatchMsgs(len(items)) // as projectPredicted does
				out, w, err := s.buildPredicted(items, ids, lockIDs, parts, false, *back)
				if err != nil {
					b.Fatal(err)
				}
				var batch pgx.Batch
				w.queue(&batch, items, out)
				// pgx's fresh connection buffer, then the batch's
				// reservation in the kept one (sendBatch).
				wbuf, _ := (&wbufReserve{need: w.wireLen() + wbufSlack, kept: kept}).Encode(make([]byte, 0, 1024))
				for _, q := range batch.QueuedQueries {
					params := make([]byte, 0, 256)
					for _, a := range q.Arguments {
						oid, format := benchArgOID(b, a)
						at := len(params)
						if params, err = m.Encode(oid, format, a, params); err != nil {
							b.Fatal(err)
						}
						wbuf = append(wbuf, params[at:]...)
					}
				}
				if &wbuf[:1][0] != &kept.b[:1][0] {
					b.Fatal("the batch outgrew its reservation (batchWrites.wireLen)")
				}
				bytes = len(wbuf)
				w.release()
				putBatchMsgs(back)
			}
			b.SetBytes(int64(bytes))
		})
	}
}

// benchArgOID is the parameter type PostgreSQL reports for a projection
// statement's argument a, and the format pgx sends it in.
func benchArgOID(b *testing.B, a any) (uint32, int16) {
	switch a.(type) {
	case []pgtype.UUID:
		return pgtype.UUIDArrayOID, pgtype.BinaryFormatCode
	case []int64:
		return pgtype.Int8ArrayOID, pgtype.BinaryFormatCode
	case []int32:
		return pgtype.Int4ArrayOID, pgtype.BinaryFormatCode
	case []bool:
		return pgtype.BoolArrayOID, pgtype.BinaryFormatCode
	case [][]byte:
		return pgtype.ByteaArrayOID, pgtype.BinaryFormatCode
	case segmentPack:
		return pgtype.ByteaOID, pgtype.BinaryFormatCode
	case []string:
		return pgtype.TextArrayOID, pgtype.BinaryFormatCode
	case string:
		return pgtype.TextOID, pgtype.TextFormatCode
	case time.Time:
		return pgtype.TimestamptzOID, pgtype.BinaryFormatCode
	}
	b.Fatalf("no OID for %T", a)
	return 0, 0
}
