package pg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/binenc"
)

// FuzzSegmentDecode checks the segment body decoders on two kinds of
// input.
//
// An arbitrary body (bit rot, a truncated bytea, a body of another
// version): DecodeSegment and the range decoder (appendSegmentOffsets,
// decodeOffsets into []PoppedMessage) never panic; every failure is
// ErrBadSegment; the range decoder gives exactly the answer and the error
// of refRangeDecode (the binenc.Reader decoder it replaced); and where
// DecodeSegment reads the body, the range decoder over all its offsets
// gives the same messages (and over any range, the messages of that
// range).
//
// A body made by EncodeSegment from messages built out of spec
// (segmentSpec): it is SegmentLen bytes long and round-trips exactly
// through DecodeSegment, through the range decoder for the range
// from..to, and through deliverClaimed over the messages split into
// segments of per messages, appended after a message already in the
// answer (which must stay as it was).
func FuzzSegmentDecode(f *testing.F) {
	sub, tr := "sub", uuid.New()
	long := bytes.Repeat([]byte("x"), 300)
	seed := EncodeSegment(nil, []Message{
		{ID: uuid.New(), TransactionID: "tx-0", CreatedAtMicros: 1e15, Payload: []byte(`{"a":1}`)},
		{ID: uuid.New(), TransactionID: "tx-1", CreatedAtMicros: -5, ProducerSub: &sub, TraceID: &tr, Payload: long, Encrypted: true},
		{ID: uuid.New(), CreatedAtMicros: 1<<62 + 3, Payload: nil},
	})
	f.Add(seed, []byte{0x07, 200, 1, 2, 3, 4, 5, 6, 7, 8, 0x81, 20, 0x02}, int16(0), int16(2), uint8(1))
	// Compressed bodies (version 2): whole, cut short, with a length or a
	// count that is not the block's.
	var many []Message
	for i := range 8 {
		many = append(many, Message{ID: uuid.UUID{byte(i)}, TransactionID: "tx", CreatedAtMicros: 1e15 + int64(i), Payload: long})
	}
	v2 := storeSegment(nil, EncodeSegment(nil, many), len(many), 1e15)
	if v2[0] != segmentVersionS2 {
		f.Fatal("the compressed seed is not compressed")
	}
	f.Add(v2, []byte{}, int16(0), int16(7), uint8(0))
	f.Add(v2[:len(v2)-3], []byte{}, int16(2), int16(3), uint8(0))
	f.Add(append([]byte{2, 8, 0, 0x80, 0x20}, v2[5:]...), []byte{}, int16(0), int16(7), uint8(0))
	f.Add(append([]byte{2, 7}, v2[2:]...), []byte{}, int16(0), int16(7), uint8(0))
	f.Add(seed[:len(seed)-1], []byte{}, int16(1), int16(1), uint8(0))
	f.Add(append(slices.Clone(seed), 0), []byte{0xff, 0xff, 0xff}, int16(-1), int16(9), uint8(2))
	f.Add([]byte{1, 0}, []byte{0}, int16(0), int16(0), uint8(3))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []byte{}, int16(0), int16(5), uint8(0))
	f.Add([]byte{2, 1}, []byte{}, int16(0), int16(0), uint8(0))
	f.Add([]byte{}, []byte{}, int16(0), int16(0), uint8(0))
	// Lengths past the end, and past math.MaxInt (negative as an int), in
	// a message skipped over (from 1) and in one decoded.
	for _, l := range []uint64{1 << 63, 1<<64 - 1, 1 << 40, 200} {
		head := append([]byte{1, 2}, make([]byte, 18)...)
		f.Add(binary.AppendUvarint(slices.Clone(head), l), []byte{}, int16(1), int16(1), uint8(0))
		f.Add(binary.AppendUvarint(slices.Clone(head), l), []byte{}, int16(0), int16(1), uint8(0))
		pay := append(slices.Clone(head), 0)
		f.Add(binary.AppendUvarint(pay, l), []byte{}, int16(1), int16(1), uint8(0))
		sub := append(slices.Clone(head), 0)
		sub[18] = 1 // flags: a producer subject
		f.Add(binary.AppendUvarint(sub, l), []byte{}, int16(1), int16(1), uint8(0))
	}
	f.Fuzz(func(t *testing.T, body, spec []byte, from, to int16, per uint8) {
		checkArbitraryBody(t, body, int64(from), int64(to))
		checkRoundTrip(t, segmentSpec(spec), int64(from), int64(to), int(per))
	})
}

// checkArbitraryBody is FuzzSegmentDecode's first half: body is read as
// the segment of offsets base..base+n-1, n its header's count (or a
// count it does not hold, when the header cannot be read or n is too
// large to be a real segment's).
func checkArbitraryBody(t *testing.T, body []byte, from, to int64) {
	pid := uuid.UUID{1, 2, 3}
	const base = 1000
	full, fullErr := DecodeSegment(body)
	if fullErr != nil && !errors.Is(fullErr, ErrBadSegment) {
		t.Fatalf("DecodeSegment: %v is not ErrBadSegment", fullErr)
	}
	n := int64(1)
	if len(body) > 1 {
		if v, k := binary.Uvarint(body[1:]); k > 0 && v > 0 && v <= 1<<12 {
			n = int64(v)
		}
	}
	last := base + n - 1
	check := func(from, to int64) {
		prefix := []StoredMessage{{Offset: -7}}
		got, err := appendSegmentOffsets(slices.Clone(prefix), pid, base, last, body, from, to)
		want, wantErr := refRangeDecode(slices.Clone(prefix), pid, base, last, body, from, to)
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%d..%d of %x: error %v, the decoder before gave %v", from, to, body, err, wantErr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadSegment) {
				t.Fatalf("%d..%d: %v is not ErrBadSegment", from, to, err)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d..%d of %x:\n got %+v\nwant %+v", from, to, body, got, want)
		}
		if got[0].Offset != -7 {
			t.Fatalf("%d..%d: the message already in out was changed: %+v", from, to, got[0])
		}
		popped, perr := decodeOffsets[PoppedMessage](nil, pid, base, last, body, from, to)
		if perr != nil || len(popped) != len(got)-1 {
			t.Fatalf("%d..%d: into []PoppedMessage: %d messages, %v; into []StoredMessage: %d", from, to, len(popped), perr, len(got)-1)
		}
		for i := range popped {
			if !reflect.DeepEqual(popped[i].StoredMessage, got[i+1]) || popped[i].LeaseID != uuid.Nil {
				t.Fatalf("%d..%d: message %d into []PoppedMessage %+v, into []StoredMessage %+v", from, to, i, popped[i], got[i+1])
			}
		}
		if fullErr == nil {
			for i, sm := range got[1:] {
				if sm.PartitionID != pid || !sameMessage(sm.Message, full[sm.Offset-base]) {
					t.Fatalf("%d..%d: message %d is %+v, DecodeSegment read %+v", from, to, i, sm, full[sm.Offset-base])
				}
			}
		}
	}
	check(base+from, base+to)
	check(base, last)
	allRead, allErr := appendSegmentOffsets(nil, pid, base, last, body, base, last)
	switch {
	case fullErr == nil && int64(len(full)) == n && (allErr != nil || len(allRead) != len(full)):
		t.Fatalf("DecodeSegment read %d messages of %x, the range decoder %d: %v", len(full), body, len(allRead), allErr)
	case fullErr != nil && allErr == nil && !bytes.Contains([]byte(fullErr.Error()), []byte("trailing bytes")):
		t.Fatalf("the range decoder read all %d messages of %x, DecodeSegment refused it: %v", n, body, fullErr)
	}
}

// checkRoundTrip is FuzzSegmentDecode's second half.
func checkRoundTrip(t *testing.T, msgs []Message, from, to int64, per int) {
	pid := uuid.UUID{9}
	const base = 1 << 40
	body := EncodeSegment(nil, msgs)
	if len(body) != SegmentLen(msgs) {
		t.Fatalf("EncodeSegment wrote %d bytes, SegmentLen says %d", len(body), SegmentLen(msgs))
	}
	got, err := DecodeSegment(body)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("DecodeSegment of %d messages: %d, %v", len(msgs), len(got), err)
	}
	// Stored compressed (where that pays), it reads back the same.
	if len(msgs) > 0 {
		stored := storeSegment(nil, body, len(msgs), msgs[0].CreatedAtMicros)
		if stored[0] == segmentVersionS2 {
			if first, ok := firstCreatedAt(stored[:min(len(stored), segmentPrefixBytes)]); !ok || first != msgs[0].CreatedAtMicros {
				t.Fatalf("firstCreatedAt of the compressed body: %d %v, want %d", first, ok, msgs[0].CreatedAtMicros)
			}
		} else if !bytes.Equal(stored, body) {
			t.Fatal("storeSegment changed a body it did not compress")
		}
		again, err := DecodeSegment(stored)
		if err != nil || len(again) != len(msgs) {
			t.Fatalf("DecodeSegment of %d messages stored: %d, %v", len(msgs), len(again), err)
		}
		for i := range msgs {
			if !sameMessage(again[i], msgs[i]) {
				t.Fatalf("stored: message %d is %+v, encoded %+v", i, again[i], msgs[i])
			}
		}
		body = stored // the range decoder and deliverClaimed below read it
	}
	for i := range msgs {
		if !sameMessage(got[i], msgs[i]) {
			t.Fatalf("DecodeSegment: message %d is %+v, encoded %+v", i, got[i], msgs[i])
		}
	}
	if len(msgs) == 0 {
		return
	}
	last := base + int64(len(msgs)) - 1
	lo, hi := base+from, base+to
	rng, err := appendSegmentOffsets(nil, pid, base, last, body, lo, hi)
	if err != nil {
		t.Fatalf("%d..%d: %v", from, to, err)
	}
	var want []int64
	for off := max(lo, base); off <= min(hi, last); off++ {
		want = append(want, off)
	}
	if len(rng) != len(want) {
		t.Fatalf("%d..%d of %d messages: %d decoded", from, to, len(msgs), len(rng))
	}
	for i, sm := range rng {
		if sm.Offset != want[i] || sm.PartitionID != pid || !sameMessage(sm.Message, msgs[sm.Offset-base]) {
			t.Fatalf("%d..%d: message %d is %+v, encoded offset %d %+v", from, to, i, sm, want[i], msgs[want[i]-base])
		}
	}

	// deliverClaimed over the messages in segments of per (1..8), for a
	// cursor at from taking up to to (both clipped to the messages),
	// after a message of another partition already in the answer.
	per = per%8 + 1
	first := base + min(max(from, 0), int64(len(msgs))-1)
	take := int(min(max(to-from+1, 1), last-first+1))
	plain := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Encrypted = false // no key: a Store{} refuses encrypted payloads
		plain[i] = m
	}
	var segs []claimedSegment
	for b := 0; b < len(plain); b += per {
		part := plain[b:min(b+per, len(plain))]
		segs = append(segs, claimedSegment{base + int64(b), base + int64(b+len(part)) - 1, EncodeSegment(nil, part)})
	}
	cc := &claimedCursor{id: pid, name: "p", take: take, updated: true, segs: segs,
		cursorRow: cursorRow{offset: first, nextOffset: last + 1, leaseEnd: -1}}
	other := PoppedMessage{StoredMessage: StoredMessage{Queue: "q0", Partition: "p0", PartitionID: uuid.UUID{7}, Offset: 3,
		Message: Message{ID: uuid.UUID{7}, Payload: []byte("other")}}}
	dst := make([]PoppedMessage, 1, 1+take)
	dst[0] = other
	lease := uuid.UUID{5}
	s := &Store{}
	out, err := s.deliverClaimed(dst, &queueRow{name: "q"}, "p", PopRequest{Queue: "q"}, lease, cc)
	if err != nil {
		t.Fatalf("deliverClaimed %d+%d in segments of %d: %v", first-base, take, per, err)
	}
	if len(out) != 1+take || !reflect.DeepEqual(out[0], other) {
		t.Fatalf("deliverClaimed %d+%d: %d messages, first %+v", first-base, take, len(out), out[0])
	}
	for i, pm := range out[1:] {
		off := first + int64(i)
		if pm.Offset != off || pm.PartitionID != pid || pm.Queue != "q" || pm.Partition != "p" || pm.LeaseID != lease ||
			!sameMessage(pm.Message, plain[off-base]) {
			t.Fatalf("deliverClaimed %d+%d: message %d is %+v, encoded %+v", first-base, take, i, pm, plain[off-base])
		}
	}
}

// segmentSpec builds messages from fuzz input: per message a header byte
// h (flags h&7; h&0x80 makes the payload longer than a one-byte length
// holds), the 8 bytes of its time (any int64, negative ones too), then
// the lengths and bytes of its transactionId, producer subject and
// payload, read from spec as far as it goes (short reads pad nothing).
func segmentSpec(spec []byte) []Message {
	take := func(n int) []byte {
		n = min(n, len(spec))
		b := spec[:n]
		spec = spec[n:]
		return b
	}
	byteOf := func() int {
		if b := take(1); len(b) == 1 {
			return int(b[0])
		}
		return 0
	}
	var msgs []Message
	for i := 0; len(spec) > 0 && i < 64; i++ {
		h := byte(byteOf())
		var ts [8]byte
		copy(ts[:], take(8))
		m := Message{ID: uuid.UUID{byte(i), h, 0xee}, CreatedAtMicros: int64(binary.LittleEndian.Uint64(ts[:])),
			Encrypted: h&4 != 0}
		m.TransactionID = string(take(byteOf() % 40))
		if h&1 != 0 {
			s := string(take(byteOf() % 20))
			m.ProducerSub = &s
		}
		if h&2 != 0 {
			tr := uuid.UUID{0xaa, byte(i), h}
			m.TraceID = &tr
		}
		n := byteOf()
		if h&0x80 != 0 {
			m.Payload = bytes.Repeat([]byte{h}, 128+n*4)
		} else {
			m.Payload = slices.Clone(take(n))
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// sameMessage: a and b hold the same message (an empty payload nil or
// not).
func sameMessage(a, b Message) bool {
	return a.ID == b.ID && a.TransactionID == b.TransactionID && a.CreatedAtMicros == b.CreatedAtMicros &&
		reflect.DeepEqual(a.ProducerSub, b.ProducerSub) && reflect.DeepEqual(a.TraceID, b.TraceID) &&
		bytes.Equal(a.Payload, b.Payload) && a.Encrypted == b.Encrypted
}

// refRangeDecode is appendSegmentOffsets as it was before it became the
// generic decodeOffsets (straight into []StoredMessage): the reference the
// fuzz test compares it with.
func refRangeDecode(out []StoredMessage, pid uuid.UUID, base, last int64, body []byte, from, to int64) ([]StoredMessage, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("partition %s offset %d: %w: "+format, append([]any{pid, base, ErrBadSegment}, args...)...)
	}
	body, err := plainSegment(body) // version 2: what it holds
	if err != nil {
		return nil, fmt.Errorf("partition %s offset %d: %w", pid, base, err)
	}
	rd := binenc.NewReader(body)
	if v := rd.Byte(); rd.Err() == nil && v != segmentVersion {
		return nil, bad("version %d", v)
	}
	n := rd.Uvarint()
	if rd.Err() != nil {
		return nil, bad("header")
	}
	if n != uint64(last-base+1) {
		return nil, bad("%d messages for %d offsets", n, last-base+1)
	}
	from, to = max(from, base), min(to, last)
	if from > to {
		return out, nil
	}
	for off := base; off <= to; off++ {
		if off < from {
			rd.Fixed(16)
			rd.Varint()
			flags := rd.Byte()
			rd.Bytes()
			if flags&1 != 0 {
				rd.Bytes()
			}
			if flags&2 != 0 {
				rd.Fixed(16)
			}
			rd.Bytes()
			if rd.Err() != nil {
				return nil, bad("message %d: %v", off-base, rd.Err())
			}
			continue
		}
		out = append(out, StoredMessage{PartitionID: pid, Offset: off})
		m := &out[len(out)-1].Message
		copy(m.ID[:], rd.Fixed(16))
		m.CreatedAtMicros = rd.Varint()
		flags := rd.Byte()
		m.TransactionID = string(rd.Bytes())
		if flags&1 != 0 {
			s := string(rd.Bytes())
			m.ProducerSub = &s
		}
		if flags&2 != 0 {
			var tr uuid.UUID
			copy(tr[:], rd.Fixed(16))
			m.TraceID = &tr
		}
		m.Payload = rd.Bytes()
		m.Encrypted = flags&4 != 0
		if rd.Err() != nil {
			return nil, bad("message %d: %v", off-base, rd.Err())
		}
	}
	return out, nil
}
