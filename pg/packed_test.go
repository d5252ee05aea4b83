package pg_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// TestStoreSegmentsBothForms: the projector's segment write takes the
// bodies as one bytea cut by offsets and lengths
// (queen.store_segments_packed); the bytea[] form that brokers of the
// version before call (queen.store_segments) still writes beside it. Each
// stores the bodies it was given at the offsets it was given, one after
// the other on the same partition; a call without segments does nothing;
// and a layout that does not cover the bytes it comes with is refused
// before anything is written.
func TestStoreSegmentsBothForms(t *testing.T) {
	x := setupBrokers(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x.projectA(t, at("packed", "P", "")) // offset 0; next_offset 1
	ids := partitionIDsOf(t, x.a, "packed")
	pool := x.a.Pool()
	one := pg.EncodeSegment(nil, []pg.Message{at("packed", "P", "").Message})
	two := pg.EncodeSegment(nil, []pg.Message{at("packed", "P", "").Message, at("packed", "P", "").Message})

	// No segments: nothing to do, in either form.
	if _, err := pool.Exec(ctx, `SELECT queen.store_segments('{}'::uuid[], '{}'::bigint[], '{}'::integer[], NULL::text[], NULL::boolean[], '{}'::bytea[])`); err != nil {
		t.Fatalf("store_segments of nothing: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT queen.store_segments_packed('{}'::uuid[], '{}'::bigint[], '{}'::integer[], NULL::text[], NULL::boolean[], '{}'::integer[], '{}'::integer[], ''::bytea)`); err != nil {
		t.Fatalf("store_segments_packed of nothing: %v", err)
	}
	// The older form: offset 1.
	if _, err := pool.Exec(ctx, `SELECT queen.store_segments($1::uuid[], '{1}'::bigint[], '{1}'::integer[], NULL::text[], NULL::boolean[], $2::bytea[])`,
		ids, [][]byte{one}); err != nil {
		t.Fatalf("store_segments: %v", err)
	}
	// A layout longer than its bytes: refused, nothing written.
	_, err := pool.Exec(ctx, `SELECT queen.store_segments_packed($1::uuid[], '{2}'::bigint[], '{2}'::integer[], NULL::text[], NULL::boolean[], '{0}'::integer[], $2::integer[], $3::bytea)`,
		ids, []int32{int32(len(two)) + 1}, two)
	if err == nil || !strings.Contains(err.Error(), "do not match their layout") {
		t.Fatalf("a layout past its bytes: %v, want refused", err)
	}
	// The packed form: offsets 2-3, one body that is the whole pack.
	if _, err := pool.Exec(ctx, `SELECT queen.store_segments_packed($1::uuid[], '{2}'::bigint[], '{2}'::integer[], NULL::text[], NULL::boolean[], '{0}'::integer[], $2::integer[], $3::bytea)`,
		ids, []int32{int32(len(two))}, two); err != nil {
		t.Fatalf("store_segments_packed: %v", err)
	}
	rows, err := pool.Query(ctx, `SELECT base_offset, last_offset, body FROM queen.segments WHERE partition_id = $1 ORDER BY base_offset`, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	type seg struct {
		base, last int64
		body       []byte
	}
	var got []seg
	for rows.Next() {
		var s seg
		if err := rows.Scan(&s.base, &s.last, &s.body); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].base != 1 || got[1].last != 1 || !bytes.Equal(got[1].body, one) ||
		got[2].base != 2 || got[2].last != 3 || !bytes.Equal(got[2].body, two) {
		t.Fatalf("segments: %+v", got)
	}
	var next int64
	if err := pool.QueryRow(ctx, `SELECT next_offset FROM queen.partitions WHERE id = $1`, ids[0]).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next != 4 {
		t.Fatalf("next_offset %d, want 4", next)
	}
}

// TestStoreSegmentsPackedCutsBodies: several partitions' bodies in one
// pack, of different lengths, each stored as its own segment; layouts
// whose lengths do not add up to the pack, hold a negative length or are
// too short are refused.
func TestStoreSegmentsPackedCutsBodies(t *testing.T) {
	x := setupBrokers(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	x.projectA(t, at("cut", "A", ""), at("cut", "B", ""), at("cut", "C", ""))
	ids := partitionIDsOf(t, x.a, "cut")
	if len(ids) != 3 {
		t.Fatalf("%d partitions", len(ids))
	}
	bodies := make([][]byte, len(ids))
	var pack []byte
	var offsets, lens []int32
	for i := range ids {
		msgs := make([]pg.Message, i+1)
		for k := range msgs {
			msgs[k] = at("cut", "A", "").Message
		}
		bodies[i] = pg.EncodeSegment(nil, msgs)
		offsets, lens = append(offsets, int32(len(pack))), append(lens, int32(len(bodies[i])))
		pack = append(pack, bodies[i]...)
	}
	const call = `SELECT queen.store_segments_packed($1::uuid[], '{1,1,1}'::bigint[], '{1,2,3}'::integer[], NULL::text[], NULL::boolean[], $2::integer[], $3::integer[], $4::bytea)`
	// Layouts the function refuses before anything is written: lengths
	// that do not add up to the pack, a negative length (the sum right),
	// too few offsets or lengths.
	for _, bad := range []struct{ offsets, lens []int32 }{
		{offsets, []int32{lens[0], lens[1], lens[2] + 1}},
		{offsets, []int32{lens[0], lens[1], lens[2] - 1}},
		{[]int32{0, lens[0] + lens[1], lens[0]}, []int32{lens[0] + lens[1], -lens[1], lens[1] + lens[2]}},
		{offsets[:2], lens},
		{offsets, lens[:2]},
	} {
		if _, err := x.a.Pool().Exec(ctx, call, ids, bad.offsets, bad.lens, pack); err == nil ||
			!strings.Contains(err.Error(), "do not match their layout") || !strings.Contains(err.Error(), "22023") {
			t.Fatalf("layout %v %v: %v, want refused with 22023", bad.offsets, bad.lens, err)
		}
	}
	if _, err := x.a.Pool().Exec(ctx, call, ids, offsets, lens, pack); err != nil {
		t.Fatalf("store_segments_packed: %v", err)
	}
	for i, id := range ids {
		var body []byte
		var last int64
		if err := x.a.Pool().QueryRow(ctx, `SELECT last_offset, body FROM queen.segments WHERE partition_id = $1 AND base_offset = 1`, id).Scan(&last, &body); err != nil {
			t.Fatal(err)
		}
		if last != int64(i+1) || !bytes.Equal(body, bodies[i]) {
			t.Fatalf("partition %d: last %d, body %d bytes; want %d, %d bytes", i, last, len(body), i+1, len(bodies[i]))
		}
	}
}
