package pg_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestSegmentsStoredCompressed: a broker stores a segment of compressible
// payloads compressed (body version 2, a fraction of its plain size), one
// of payloads that do not compress and a one-message one as they are
// (version 1); a broker with PlainSegments stores every body as version 1;
// segments.body is EXTERNAL (PostgreSQL does not compress again). Every
// body, of both brokers, reads back as what was pushed: through a pop (the
// claim's decoder) and through the segment reader, in offset order.
func TestSegmentsStoredCompressed(t *testing.T) {
	url := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comp := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger})
	plain := testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger, PlainSegments: true})
	for _, s := range []*pg.Store{comp, plain} {
		if err := s.EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var storage string
	if err := comp.Pool().QueryRow(ctx, `SELECT attstorage::text FROM pg_attribute
		WHERE attrelid = 'queen.segments'::regclass AND attname = 'body'`).Scan(&storage); err != nil {
		t.Fatal(err)
	}
	if storage != "e" {
		t.Fatalf("segments.body storage %q, want e (EXTERNAL)", storage)
	}

	json := func(i int, random bool) []byte {
		if random {
			b := make([]byte, 600)
			rand.Read(b)
			return fmt.Appendf(nil, `{"i":%d,"blob":%q}`, i, base64.StdEncoding.EncodeToString(b))
		}
		return fmt.Appendf(nil, `{"i":%d,"event":"order.created","customer":{"country":"NL","tier":"gold"},"lines":[{"sku":"A-1","qty":2}]}`, i)
	}
	batch := func(part string, n int, random bool) []pg.ProjectItem {
		items := make([]pg.ProjectItem, n)
		for i := range items {
			items[i] = at("zq", part, "")
			items[i].Message.Payload = json(i, random)
		}
		return items
	}
	brokerC, brokerP := uuid.New(), uuid.New()
	var pushed []pg.ProjectItem
	project := func(s *pg.Store, broker uuid.UUID, wal uint64, items []pg.ProjectItem) {
		t.Helper()
		mustProject(t, s, broker, wal, items)
		pushed = append(pushed, items...)
	}
	// Partition "c": compressed, then a one-message segment, then plain
	// from the other broker, then compressed again. "r": random payloads.
	project(comp, brokerC, 1, append(batch("c", 40, false), batch("r", 40, true)...))
	project(comp, brokerC, 2, batch("c", 1, false))
	project(plain, brokerP, 1, batch("c", 40, false))
	project(comp, brokerC, 3, batch("c", 40, false))

	type seg struct {
		part    string
		base    int64
		version byte
		size    int
	}
	rows, err := comp.Pool().Query(ctx, `SELECT p.name, s.base_offset, get_byte(s.body, 0), octet_length(s.body)
		FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id ORDER BY p.name, s.base_offset`)
	if err != nil {
		t.Fatal(err)
	}
	var segs []seg
	for rows.Next() {
		var s seg
		var v int32
		if err := rows.Scan(&s.part, &s.base, &v, &s.size); err != nil {
			t.Fatal(err)
		}
		s.version = byte(v)
		segs = append(segs, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantVersions := []struct {
		part    string
		base    int64
		version byte
	}{{"c", 0, 2}, {"c", 40, 1}, {"c", 41, 1}, {"c", 81, 2}, {"r", 0, 1}}
	if len(segs) != len(wantVersions) {
		t.Fatalf("segments %+v", segs)
	}
	for i, w := range wantVersions {
		if g := segs[i]; g.part != w.part || g.base != w.base || g.version != w.version {
			t.Fatalf("segment %d: %+v, want partition %s base %d version %d", i, g, w.part, w.base, w.version)
		}
	}
	if segs[0].size*3 > segs[2].size*2 {
		t.Errorf("compressed segment %d bytes, the plain one of the same 40 payloads %d: want under two thirds", segs[0].size, segs[2].size)
	}
	t.Logf("40 messages: %d bytes compressed, %d plain", segs[0].size, segs[2].size)

	// The segment reader: every message as pushed, in offset order.
	got := stored(t, comp, "zq")
	want := map[string][]pg.ProjectItem{}
	for _, it := range pushed {
		want[it.Partition] = append(want[it.Partition], it)
	}
	for part, items := range want {
		if len(got[part]) != len(items) {
			t.Fatalf("partition %s: %d messages read, %d pushed", part, len(got[part]), len(items))
		}
		for i, it := range items {
			if m := got[part][i].msg; m.ID != it.Message.ID || !bytes.Equal(m.Payload, it.Message.Payload) {
				t.Fatalf("partition %s offset %d: %s %s, pushed %s %s", part, i, m.ID, m.Payload, it.Message.ID, it.Message.Payload)
			}
		}
	}
	// A pop of each partition (the claim's decoder), from both brokers.
	for i, part := range []string{"c", "r"} {
		s := []*pg.Store{plain, comp}[i]
		res, err := s.Pop(ctx, pg.PopRequest{Queue: "zq", Partition: part, Group: pg.QueueModeGroup, Batch: 1000, Partitions: 1, AutoAck: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) != len(want[part]) {
			t.Fatalf("pop of %s: %d messages, %d pushed", part, len(res.Messages), len(want[part]))
		}
		for j, m := range res.Messages {
			if m.Offset != int64(j) || m.ID != want[part][j].Message.ID || !bytes.Equal(m.Payload, want[part][j].Message.Payload) {
				t.Fatalf("pop of %s: message %d is offset %d %s %s, pushed %s %s", part, j, m.Offset, m.ID, m.Payload,
					want[part][j].Message.ID, want[part][j].Message.Payload)
			}
		}
	}
}
