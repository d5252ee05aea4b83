package pg

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestFastArrayCodecsMatchPgx: for every shape registerFastArrays takes
// over (bigint[] from []int64, integer[] from []int32, uuid[] from
// []pgtype.UUID, bytea[] from [][]byte, bytea from segmentPack), nil,
// empty, one element, NULL elements and many, the bytes are exactly what
// pgx's own codecs write (for segmentPack: what they write for the bodies
// EncodeSegment builds, joined, both as []byte and through segmentPack's
// BytesValuer fallback), and the plan is the fast one; other shapes (text
// format, a []int32 as bigint[], a []int64 as integer[]) still encode.
func TestFastArrayCodecsMatchPgx(t *testing.T) {
	plain, fast := pgtype.NewMap(), pgtype.NewMap()
	registerFastArrays(fast)

	msgs := func(n int) []Message {
		out := make([]Message, n)
		for i := range out {
			out[i] = Message{ID: uuid.New(), TransactionID: fmt.Sprintf("tx-%d", i), CreatedAtMicros: int64(1e15 + i),
				Payload: bytes.Repeat([]byte{'x'}, 100*i), Encrypted: i%3 == 1}
			if i%2 == 1 {
				sub := "sub"
				out[i].ProducerSub = &sub
			}
			if i%4 == 3 {
				tr := uuid.New()
				out[i].TraceID = &tr
			}
		}
		return out
	}
	segs := segmentBodies{msgs(1), msgs(7), msgs(300)}
	bodies := make([][]byte, len(segs))
	for i := range segs {
		bodies[i] = EncodeSegment(nil, segs[i])
	}
	cases := []struct {
		name   string
		oid    uint32
		value  any
		want   any // what pgx encodes to the same bytes; nil: value itself
		planOf any // the fast plan expected
	}{
		{"int8 nil", pgtype.Int8ArrayOID, []int64(nil), nil, encodeInt8Array{}},
		{"int8 empty", pgtype.Int8ArrayOID, []int64{}, nil, encodeInt8Array{}},
		{"int8 one", pgtype.Int8ArrayOID, []int64{-1}, nil, encodeInt8Array{}},
		{"int8 many", pgtype.Int8ArrayOID, []int64{0, 1, 255, 256, math.MaxInt64, math.MinInt64, -7}, nil, encodeInt8Array{}},
		{"int4 nil", pgtype.Int4ArrayOID, []int32(nil), nil, encodeInt4Array{}},
		{"int4 empty", pgtype.Int4ArrayOID, []int32{}, nil, encodeInt4Array{}},
		{"int4 many", pgtype.Int4ArrayOID, []int32{0, 1, -1, 255, 256, math.MaxInt32, math.MinInt32}, nil, encodeInt4Array{}},
		{"uuid nil", pgtype.UUIDArrayOID, []pgtype.UUID(nil), nil, encodeUUIDArray{}},
		{"uuid empty", pgtype.UUIDArrayOID, []pgtype.UUID{}, nil, encodeUUIDArray{}},
		{"uuid with null", pgtype.UUIDArrayOID, []pgtype.UUID{{Bytes: uuid.New(), Valid: true}, {}, {Bytes: uuid.New(), Valid: true}}, nil, encodeUUIDArray{}},
		{"bytea nil", pgtype.ByteaArrayOID, [][]byte(nil), nil, encodeByteaArray{}},
		{"bytea empty", pgtype.ByteaArrayOID, [][]byte{}, nil, encodeByteaArray{}},
		{"bytea with null and empty", pgtype.ByteaArrayOID, [][]byte{[]byte("a"), nil, {}, bytes.Repeat([]byte{0}, 1000)}, nil, encodeByteaArray{}},
		{"segment pack", pgtype.ByteaOID, segmentPack(bytes.Join(bodies, nil)), bytes.Join(bodies, nil), encodeSegmentPack{}},
		{"segment pack nil", pgtype.ByteaOID, segmentPack(nil), []byte(nil), encodeSegmentPack{}},
		{"segment pack empty", pgtype.ByteaOID, segmentPack{}, []byte{}, encodeSegmentPack{}},
		{"segment pack via BytesValuer", pgtype.ByteaOID, segmentPack(bodies[2]), segmentPack(bodies[2]), encodeSegmentPack{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if want == nil {
				want = c.value
			}
			prefix := []byte("prefix")
			exp, err := plain.Encode(c.oid, pgtype.BinaryFormatCode, want, bytes.Clone(prefix))
			if err != nil {
				t.Fatal(err)
			}
			got, err := fast.Encode(c.oid, pgtype.BinaryFormatCode, c.value, bytes.Clone(prefix))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, exp) || (got == nil) != (exp == nil) {
				t.Fatalf("fast encoding differs from pgx's:\n got %x\nwant %x", got, exp)
			}
			if plan := fast.PlanEncode(c.oid, pgtype.BinaryFormatCode, c.value); fmt.Sprintf("%T", plan) != fmt.Sprintf("%T", c.planOf) {
				t.Fatalf("plan %T, want %T", plan, c.planOf)
			}
		})
	}
	// Shapes left to pgx still encode, in both formats.
	for _, v := range []struct {
		oid    uint32
		format int16
		value  any
	}{
		{pgtype.Int8ArrayOID, pgtype.TextFormatCode, []int64{1, 2}},
		{pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, []int32{1, 2}},
		{pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, []int64{1, 2}},
		{pgtype.Int4ArrayOID, pgtype.TextFormatCode, []int32{1, 2}},
		{pgtype.ByteaArrayOID, pgtype.TextFormatCode, [][]byte{[]byte("a")}},
		{pgtype.ByteaOID, pgtype.BinaryFormatCode, []byte("abc")},
		{pgtype.ByteaOID, pgtype.TextFormatCode, []byte("abc")},
	} {
		exp, err := plain.Encode(v.oid, v.format, v.value, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fast.Encode(v.oid, v.format, v.value, nil)
		if err != nil || !bytes.Equal(got, exp) {
			t.Fatalf("%T in format %d: %q, %v; want %q", v.value, v.format, got, err, exp)
		}
	}
}

// TestSegmentPackBinaryOnly: the fast codec refuses to send a segmentPack
// in text format (hex, twice the bytes), and sends it in binary.
func TestSegmentPackBinaryOnly(t *testing.T) {
	fast := pgtype.NewMap()
	registerFastArrays(fast)
	pack := segmentPack(EncodeSegment(nil, []Message{{ID: uuid.New(), Payload: []byte("{}")}}))
	if _, err := fast.Encode(pgtype.ByteaOID, pgtype.TextFormatCode, pack, nil); err == nil {
		t.Fatal("a segment pack in text format was encoded")
	}
	if _, err := fast.Encode(pgtype.ByteaOID, pgtype.BinaryFormatCode, pack, nil); err != nil {
		t.Fatalf("binary: %v", err)
	}
}

// TestSegmentLayout: packSegments' offsets and lengths cut its bytes back
// into each segment's stored body: version 1 (EncodeSegment's bytes)
// without compression, for small segments and for ones that do not
// compress; version 2 for a large compressible one; every body decodes to
// the segment's messages; each plain length is its version-1 body's. A pack given back and taken again is reused.
func TestSegmentLayout(t *testing.T) {
	noise := make([]byte, 3000)
	rand.Read(noise)
	segs := segmentBodies{nil, {{ID: uuid.New(), Payload: []byte("a")}},
		{{ID: uuid.New(), TransactionID: "t", Payload: bytes.Repeat([]byte{'p'}, 300)}, {ID: uuid.New(), Payload: []byte("{}")}},
		{{ID: uuid.New(), TransactionID: "big", CreatedAtMicros: 1767225600000000, Payload: bytes.Repeat([]byte(`{"k":"v"},`), 400)}},
		{{ID: uuid.New(), Payload: noise}}}
	for _, compress := range []bool{false, true} {
		pack, offsets, lens, plains := packSegments(segs, compress)
		if len(offsets) != len(segs) || len(lens) != len(segs) || len(plains) != len(segs) {
			t.Fatalf("layout of %d segments: %d offsets, %d lengths, %d plain lengths", len(segs), len(offsets), len(lens), len(plains))
		}
		end := 0
		for i := range segs {
			got := pack.out[offsets[i] : offsets[i]+lens[i]]
			plain := EncodeSegment(nil, segs[i])
			if int(plains[i]) != len(plain) {
				t.Fatalf("compress %v segment %d: plain length %d, want %d", compress, i, plains[i], len(plain))
			}
			wantV2 := compress && i == 3
			if wantV2 {
				if got[0] != segmentVersionS2 || len(got) >= len(plain)/2 {
					t.Fatalf("segment %d: %d bytes of version %d, plain %d; want compressed", i, len(got), got[0], len(plain))
				}
			} else if !bytes.Equal(got, plain) {
				t.Fatalf("compress %v segment %d: cut %x, want %x", compress, i, got, plain)
			}
			msgs, err := DecodeSegment(got)
			if err != nil || len(msgs) != len(segs[i]) {
				t.Fatalf("segment %d: decoded %d messages, %v", i, len(msgs), err)
			}
			for j := range msgs {
				if !sameMessage(msgs[j], segs[i][j]) {
					t.Fatalf("segment %d message %d: %+v, want %+v", i, j, msgs[j], segs[i][j])
				}
			}
			end = int(offsets[i] + lens[i])
		}
		if end != len(pack.out) {
			t.Fatalf("layout ends at %d, the pack is %d bytes", end, len(pack.out))
		}
		putPackBuf(pack)
	}
}

// TestSegmentLen: SegmentLen is the length EncodeSegment appends, for
// messages with every optional field and varint sizes at their bounds.
func TestSegmentLen(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300} {
		msgs := make([]Message, n)
		for i := range msgs {
			msgs[i] = Message{ID: uuid.New(), TransactionID: string(bytes.Repeat([]byte{'t'}, i%130)),
				CreatedAtMicros: []int64{0, -1, 63, 64, -65, math.MaxInt64, math.MinInt64}[i%7],
				Payload:         bytes.Repeat([]byte{'p'}, (i*37)%20000)}
			if i%2 == 0 {
				sub := string(bytes.Repeat([]byte{'s'}, i))
				msgs[i].ProducerSub = &sub
			}
			if i%3 == 0 {
				tr := uuid.New()
				msgs[i].TraceID = &tr
			}
		}
		body := EncodeSegment([]byte("x"), msgs)
		if got, want := SegmentLen(msgs), len(body)-1; got != want {
			t.Fatalf("%d messages: SegmentLen %d, EncodeSegment wrote %d", n, got, want)
		}
		if buf := make([]byte, 0, SegmentLen(msgs)); &EncodeSegment(buf, msgs)[:1][0] != &buf[:1][0] {
			t.Fatalf("%d messages: EncodeSegment grew a buffer of SegmentLen bytes", n)
		}
	}
}

// TestIsMintedMatchesMintedForm: isMinted(id, txid) is mintedForm(txid)
// naming id, for minted ids' texts, other versions, uppercase, another
// id's text and non-UUID keys.
func TestIsMintedMatchesMintedForm(t *testing.T) {
	v7 := uuid.Must(uuid.NewV7())
	v4 := uuid.New()
	for _, c := range []struct {
		id   uuid.UUID
		txid string
	}{
		{v7, v7.String()}, {v4, v4.String()}, {v7, strings.ToUpper(v7.String())}, {v7, uuid.Must(uuid.NewV7()).String()},
		{v7, "order-1"}, {v7, ""}, {v7, "urn:uuid:" + v7.String()}, {v7, v7.String()[:35] + "x"},
	} {
		u, ok := mintedForm(c.txid)
		if want := ok && u == c.id; isMinted(c.id, c.txid) != want {
			t.Fatalf("isMinted(%s, %q) = %v, mintedForm says %v", c.id, c.txid, !want, want)
		}
	}
}

// TestMintedTakesThePushPathsWord: a batch message flagged MintedTxID (the
// push path's word that TransactionID is ID's text) is minted without its
// text being compared, as long as its id is version 7 (as isMinted asks);
// an unflagged one is minted exactly when isMinted says so.
func TestMintedTakesThePushPathsWord(t *testing.T) {
	v7 := uuid.Must(uuid.NewV7())
	v4 := uuid.New()
	for _, c := range []struct {
		m    Message
		want bool
	}{
		{Message{ID: v7, TransactionID: v7.String(), MintedTxID: true}, true},
		{Message{ID: v7, TransactionID: v7.String()}, true},
		{Message{ID: v7, TransactionID: "order-1"}, false},
		{Message{ID: v4, TransactionID: v4.String(), MintedTxID: true}, false},
		// The flag is trusted: minted never builds the text when it is set
		// (the push path sets it only where the text is the id's).
		{Message{ID: v7, TransactionID: "not compared, but it is 36 bytes lon", MintedTxID: true}, true},
		// A mark left on a transactionId that was changed to one of
		// another length (a cleared one, a derived key) is not taken.
		{Message{ID: v7, TransactionID: "", MintedTxID: true}, false},
		{Message{ID: v7, TransactionID: "stream:derived-key", MintedTxID: true}, false},
	} {
		if got := minted(&c.m); got != c.want {
			t.Fatalf("minted(%+v) = %v, want %v", c.m, got, c.want)
		}
	}
}

// TestMintedFormMatchesParse: mintedForm answers what the parse it
// replaced (uuid.Parse of a 36-byte text without uppercase letters, of
// version 7) answers, for UUIDv7 texts, every single-byte change of one
// (each byte set to each of a set of characters around the hex digits,
// dashes and letters), other versions, uppercase and other spellings.
func TestMintedFormMatchesParse(t *testing.T) {
	ref := func(txid string) (uuid.UUID, bool) {
		if len(txid) != 36 || strings.ContainsAny(txid, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			return uuid.UUID{}, false
		}
		u, err := uuid.Parse(txid)
		if err != nil || u.Version() != 7 {
			return uuid.UUID{}, false
		}
		return u, true
	}
	check := func(txid string) {
		t.Helper()
		gu, gok := mintedForm(txid)
		wu, wok := ref(txid)
		if gok != wok || gu != wu {
			t.Fatalf("mintedForm(%q) = %s, %v; the parse says %s, %v", txid, gu, gok, wu, wok)
		}
	}
	for _, s := range []string{"", "order-1", uuid.New().String(), strings.ToUpper(uuid.Must(uuid.NewV7()).String()),
		"{" + uuid.Must(uuid.NewV7()).String() + "}", "urn:uuid:" + uuid.Must(uuid.NewV7()).String(),
		strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")} {
		check(s)
	}
	chars := []byte("-/09:@AFGZ`afgz{\x00\xff7")
	for range 20 {
		s := uuid.Must(uuid.NewV7()).String()
		check(s)
		for i := range len(s) {
			for _, c := range chars {
				b := []byte(s)
				b[i] = c
				check(string(b))
			}
		}
	}
}

// TestKeyHashIsXXH64OfPartitionAndKey: keyHash is XXH64 (seed 0) of the
// partition id's bytes followed by the transactionId's, for keys hashed
// from a copy on the stack and for longer ones, hashed as a stream.
func TestKeyHashIsXXH64OfPartitionAndKey(t *testing.T) {
	pid := uuid.New()
	for _, n := range []int{0, 1, 36, keyHashStack - 16, keyHashStack - 15, 300} {
		txid := strings.Repeat("k", n)
		want := int64(xxhash.Sum64(append(append([]byte{}, pid[:]...), txid...)))
		if want == 0 {
			want = 1
		}
		if got := keyHash(pid, txid); got != want {
			t.Fatalf("%d-byte key: keyHash %d, XXH64 %d", n, got, want)
		}
	}
}
