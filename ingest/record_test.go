package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
)

// TestRecordHeader: the header reads what EncodeRecord wrote, and a
// truncated or foreign payload is ErrBadRecord.
func TestRecordHeader(t *testing.T) {
	sub := "s"
	r := &Record{AcceptedAt: 1700000000123456, Items: []Item{
		{Queue: "q", Partition: "p", TransactionID: "t1", Payload: []byte(`1`)},
		{Queue: "q", Partition: "p", TransactionID: "t2", ProducerSub: &sub, Payload: []byte(`{"a":2}`)},
	}}
	b := EncodeRecord(nil, r)
	at, n, err := RecordHeader(b)
	if err != nil || at != r.AcceptedAt || n != 2 {
		t.Fatalf("RecordHeader = %d, %d, %v", at, n, err)
	}
	for _, bad := range [][]byte{nil, {recordKindPush}, {9, 0, 0}, b[:3]} {
		if _, _, err := RecordHeader(bad); !errors.Is(err, ErrBadRecord) {
			t.Errorf("RecordHeader(%x) error %v, want ErrBadRecord", bad, err)
		}
	}
	// Both kinds' headers read the same.
	if at, n, err := RecordHeader(encodeKind1(r)); err != nil || at != r.AcceptedAt || n != 2 {
		t.Fatalf("RecordHeader(kind 1) = %d, %d, %v", at, n, err)
	}
}

// encodeKind1 writes the first push record layout (every partition and
// transaction id spelled out), as brokers before the compact layout did.
func encodeKind1(r *Record) []byte {
	dst := []byte{recordKindPush}
	dst = binenc.AppendVarint(dst, r.AcceptedAt)
	dst = binenc.AppendUvarint(dst, uint64(len(r.Items)))
	for _, it := range r.Items {
		var flags byte
		if it.ProducerSub != nil {
			flags = 1
		}
		dst = append(dst, flags)
		dst = append(dst, it.MessageID[:]...)
		dst = binenc.AppendString(dst, it.Queue)
		dst = binenc.AppendString(dst, it.Partition)
		dst = binenc.AppendString(dst, it.TransactionID)
		if it.ProducerSub != nil {
			dst = binenc.AppendString(dst, *it.ProducerSub)
		}
		dst = binenc.AppendBytes(dst, it.Payload)
	}
	return dst
}

func sampleRecord(n int) *Record {
	sub := "svc"
	r := &Record{AcceptedAt: 1_700_000_000_000_000}
	for i := 0; i < n; i++ {
		id := uuid.Must(uuid.NewV7())
		it := Item{Queue: "q", Partition: DefaultPartition, TransactionID: id.String(), MessageID: id, Payload: []byte("0")}
		switch i % 4 {
		case 1:
			it.Partition = fmt.Sprintf("p%d", i)
		case 2:
			it.TransactionID = fmt.Sprintf("tx-%d", i)
		case 3:
			it.ProducerSub = &sub
			it.TransactionID = uuid.Must(uuid.NewV7()).String() // looks minted, is not this id
		}
		r.Items = append(r.Items, it)
	}
	return r
}

// TestRecordKinds: both layouts decode to the same record; the compact one
// keeps the smallest item under the 26 bytes it takes in a push body.
func TestRecordKinds(t *testing.T) {
	r := sampleRecord(9)
	for _, c := range []struct {
		name string
		enc  []byte
	}{{"kind 1", encodeKind1(r)}, {"kind 2", EncodeRecord(nil, r)}} {
		got, err := DecodeRecord(c.enc)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !sameRecord(r, got) {
			t.Fatalf("%s: decoded %+v, want %+v", c.name, got, r)
		}
		reused := &Record{Items: make([]Item, 20)}
		if err := DecodeRecordInto(reused, c.enc); err != nil || !sameRecord(r, reused) {
			t.Fatalf("%s: DecodeRecordInto: %v, got %+v", c.name, err, reused)
		}
		if n := ItemCount(c.enc); n != len(r.Items) {
			t.Fatalf("%s: ItemCount = %d", c.name, n)
		}
	}
	if got, want := len(EncodeRecord(nil, r)), r.EncodedLen(); got != want {
		t.Fatalf("EncodeRecord wrote %d bytes, EncodedLen says %d", got, want)
	}
	tiny := sampleRecord(1)
	if n := len(EncodeRecord(nil, tiny)) - len(EncodeRecord(nil, &Record{AcceptedAt: tiny.AcceptedAt})); n > 22 {
		t.Errorf("the smallest item takes %d bytes in a record, want at most 22", n)
	}
	bad := EncodeRecord(nil, tiny)
	bad[len(bad)-2-2-16-1] |= 0x80 // an unknown flag bit of the one item (flags, id, queue, payload)
	if _, err := DecodeRecord(bad); !errors.Is(err, ErrBadRecord) {
		t.Errorf("unknown flag bit: %v, want ErrBadRecord", err)
	}
}

// TestRecordGathered: the push path's record in pieces joins to
// EncodeRecord's bytes behind what meta held, its payload pieces are the
// items' own memory (the payload is not copied), and the other bytes fit
// in meta as first grown (it does not move under the pieces).
func TestRecordGathered(t *testing.T) {
	for _, n := range []int{0, 1, 9, 300} {
		r := sampleRecord(n)
		for i := range r.Items {
			r.Items[i].Payload = bytes.Repeat([]byte{'a' + byte(i%26)}, i%5*40) // some empty
		}
		meta, vec := encodeRecordGathered([]byte("head!"), make([][]byte, 3), r)
		if got, want := bytes.Join(vec, nil), EncodeRecord([]byte("head!"), r); !bytes.Equal(got, want) {
			t.Fatalf("%d items: gathered %x, EncodeRecord %x", n, got, want)
		}
		if want := max(2*n, 1); len(vec) != want {
			t.Fatalf("%d items: %d pieces, want %d (each item's head, then its payload; the header alone without items)", n, len(vec), want)
		}
		for i := range r.Items {
			if p := r.Items[i].Payload; len(p) > 0 && unsafe.SliceData(vec[2*i+1]) != unsafe.SliceData(p) {
				t.Fatalf("%d items: item %d's payload piece is a copy", n, i)
			}
		}
		total, payloads := r.encodedLens()
		if len(meta) != len("head!")+total-payloads {
			t.Fatalf("%d items: meta holds %d bytes, want %d", n, len(meta), len("head!")+total-payloads)
		}
		// Every head piece lies inside the meta that was returned.
		base := uintptr(unsafe.Pointer(unsafe.SliceData(meta)))
		for i := 0; i < len(vec); i += 2 {
			h := vec[i]
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(h))); len(h) > 0 && (p < base || p+uintptr(len(h)) > base+uintptr(len(meta))) {
				t.Fatalf("%d items: piece %d is not in meta (it moved)", n, i)
			}
		}
	}
}

// TestRecordReaderSkip: skipping k items and reading on gives the items a
// full decode gives from k; the end is io.EOF, and skipping past it fails.
func TestRecordReaderSkip(t *testing.T) {
	r := sampleRecord(13)
	enc := EncodeRecord(nil, r)
	for k := 0; k <= len(r.Items); k++ {
		rr, err := NewRecordReader(enc)
		if err != nil {
			t.Fatal(err)
		}
		if err := rr.Skip(k); err != nil {
			t.Fatalf("skip %d: %v", k, err)
		}
		for i := k; i < len(r.Items); i++ {
			var it Item
			if err := rr.Next(&it); err != nil {
				t.Fatalf("skip %d, item %d: %v", k, i, err)
			}
			if !sameRecord(&Record{Items: []Item{r.Items[i]}}, &Record{Items: []Item{it}}) {
				t.Fatalf("skip %d, item %d: %+v, want %+v", k, i, it, r.Items[i])
			}
		}
		if err := rr.Next(&Item{}); err != io.EOF {
			t.Fatalf("skip %d: after the last item %v, want io.EOF", k, err)
		}
	}
	rr, _ := NewRecordReader(enc)
	if err := rr.Skip(len(r.Items) + 1); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("skip past the end: %v", err)
	}
}

// TestNewItemsMintsV7: the minted message ids are RFC 9562 version 7
// UUIDs (variant bits, a millisecond time within a second of now), unique,
// strictly increasing within a push and across pushes (also pushes of more
// ids than one millisecond's 4,096 sub-millisecond steps), and a minted
// transactionId is its id's text.
func TestNewItemsMintsV7(t *testing.T) {
	var last uuid.UUID
	seen := make(map[uuid.UUID]bool)
	for _, n := range []int{1, 3, 64, 65, 5000, 1} {
		parsed := make([]ParsedItem, n)
		for i := range parsed {
			parsed[i] = ParsedItem{Queue: "q", Partition: DefaultPartition, Payload: []byte("1")}
			if i%2 == 1 {
				parsed[i].TransactionID = fmt.Sprintf("tx-%d", i)
			}
		}
		before := time.Now()
		items, err := NewItems(parsed, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			id := it.MessageID
			if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
				t.Fatalf("push of %d, item %d: %s is version %d variant %v", n, i, id, id.Version(), id.Variant())
			}
			sec, nsec := id.Time().UnixTime()
			if at := time.Unix(sec, nsec); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
				t.Fatalf("push of %d, item %d: %s has time %v, now is %v", n, i, id, at, before)
			}
			if bytes.Compare(id[:], last[:]) <= 0 || seen[id] {
				t.Fatalf("push of %d, item %d: %s does not follow %s", n, i, id, last)
			}
			last, seen[id] = id, true
			if want := parsed[i].TransactionID; want != "" && it.TransactionID != want {
				t.Fatalf("item %d: transactionId %q, want %q", i, it.TransactionID, want)
			} else if want == "" && it.TransactionID != id.String() {
				t.Fatalf("item %d: minted transactionId %q, want %s", i, it.TransactionID, id)
			}
		}
	}
}

// TestMintedTxIDTravels: an item pushed without a transactionId is marked
// MintedTxID from NewItems through the record (DecodeRecordInto,
// RecordReader) to the projection's message (AppendProjectItems), so that
// neither the record encoder nor the projection builds its id's text to
// compare; one with a transactionId (also one in another id's UUID form)
// is not, nor is any item of a kind 1 record, whose layout has no flag.
func TestMintedTxIDTravels(t *testing.T) {
	other := uuid.Must(uuid.NewV7()).String()
	parsed := []ParsedItem{
		{Queue: "q", Partition: DefaultPartition, Payload: []byte("1")},
		{Queue: "q", Partition: "p", TransactionID: "tx-1", Payload: []byte("2")},
		{Queue: "q", Partition: "p", TransactionID: other, Payload: []byte("3")},
		{Queue: "q", Partition: "p", Payload: []byte("4")},
	}
	want := []bool{true, false, false, true}
	items, err := NewItems(parsed, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got func(i int) bool) {
		t.Helper()
		for i := range want {
			if got(i) != want[i] {
				t.Fatalf("%s: item %d MintedTxID %v, want %v", what, i, got(i), want[i])
			}
		}
	}
	check("NewItems", func(i int) bool { return items[i].MintedTxID })
	r := &Record{AcceptedAt: 1, Items: items}
	enc := EncodeRecord(nil, r)
	if got, want := len(enc), r.EncodedLen(); got != want {
		t.Fatalf("EncodeRecord wrote %d bytes, EncodedLen says %d", got, want)
	}
	dec := &Record{Items: make([]Item, 8)}
	for i := range dec.Items {
		dec.Items[i].MintedTxID = true // a reused record's stale flags must not survive
	}
	if err := DecodeRecordInto(dec, enc); err != nil || !sameRecord(r, dec) {
		t.Fatalf("DecodeRecordInto: %v, %+v", err, dec)
	}
	check("DecodeRecordInto", func(i int) bool { return dec.Items[i].MintedTxID })
	pis := dec.AppendProjectItems(nil)
	check("AppendProjectItems", func(i int) bool { return pis[i].Message.MintedTxID })
	rr, err := NewRecordReader(enc)
	if err != nil {
		t.Fatal(err)
	}
	read := make([]Item, len(want))
	for i := range read {
		read[i].MintedTxID = !want[i]
		if err := rr.Next(&read[i]); err != nil {
			t.Fatal(err)
		}
	}
	check("RecordReader", func(i int) bool { return read[i].MintedTxID })
	old := &Record{Items: make([]Item, 4)}
	if err := DecodeRecordInto(old, encodeKind1(r)); err != nil || !sameRecord(r, old) {
		t.Fatalf("kind 1: %v", err)
	}
	for i, it := range old.Items {
		if it.MintedTxID {
			t.Fatalf("kind 1 item %d marked MintedTxID", i)
		}
	}
}

// TestDecodeRecordSharesNames: decoding a record whose items name
// partitions round-robin (names of one length that differ in their last
// byte, the shape intern compares first) gives every item its own
// partition and queue, and one string per distinct name.
func TestDecodeRecordSharesNames(t *testing.T) {
	r := &Record{AcceptedAt: 1}
	for i := 0; i < 40; i++ {
		id := uuid.Must(uuid.NewV7())
		r.Items = append(r.Items, Item{Queue: "bench", Partition: fmt.Sprintf("p%d", i%10), TransactionID: id.String(),
			MessageID: id, Payload: []byte("0")})
	}
	r.Items[7].Partition = "q7" // same length and last byte as p7
	dec, err := DecodeRecord(EncodeRecord(nil, r))
	if err != nil || !sameRecord(r, dec) {
		t.Fatalf("decode: %v", err)
	}
	first := make(map[string]*byte)
	for i, it := range dec.Items {
		for _, name := range []string{it.Queue, it.Partition} {
			p := unsafe.StringData(name)
			if q, ok := first[name]; ok && q != p {
				t.Fatalf("item %d: %q is a second string", i, name)
			}
			first[name] = p
		}
	}
}

// TestMintedMarkOnChangedTxID: an item still marked MintedTxID whose
// transactionId was changed to one of another length (emptied, derived)
// is written with its transactionId spelled out, not as the minted id's.
func TestMintedMarkOnChangedTxID(t *testing.T) {
	id := uuid.Must(uuid.NewV7())
	for _, txid := range []string{"", "stream:derived"} {
		r := &Record{AcceptedAt: 1, Items: []Item{{Queue: "q", Partition: "p", TransactionID: txid, MessageID: id,
			Payload: []byte("0"), MintedTxID: true}}}
		dec, err := DecodeRecord(EncodeRecord(nil, r))
		if err != nil || dec.Items[0].TransactionID != txid || dec.Items[0].MintedTxID {
			t.Fatalf("%q: decoded %+v, %v", txid, dec, err)
		}
	}
}
