package metrics

import "testing"

// TestSnapshot: the snapshot holds what was counted and observed, with the
// histograms' buckets cumulative and ending in +Inf (nil) at the count.
func TestSnapshot(t *testing.T) {
	zero := func() float64 { return 0 }
	m := New(zero, zero, zero, zero)
	m.PushItems.WithLabelValues("queued").Add(5)
	m.PushItems.WithLabelValues("buffered").Add(2)
	m.Popped.Add(3)
	m.Acks.WithLabelValues("completed", "ok").Add(2)
	m.Acks.WithLabelValues("failed", "ok").Inc()
	m.Acks.WithLabelValues("completed", "rejected").Inc()
	for _, d := range []float64{0.00015, 0.0003, 0.5} {
		m.WALFsync.Observe(d)
	}
	m.ProjectorBatch.WithLabelValues("ok").Observe(0.002)
	m.ProjectorBatch.WithLabelValues("error").Observe(0.1)
	m.ProjectorItems.Observe(7)
	s := m.Snapshot()
	if s.PushItems["queued"] != 5 || s.PushItems["buffered"] != 2 || s.Popped != 3 || s.Acks["ok"] != 3 || s.Acks["rejected"] != 1 {
		t.Errorf("counters: %+v", s)
	}
	if s.ProjectorBatch.Count != 1 || s.ProjectorErrors != 1 || s.ProjectedItems != 7 {
		t.Errorf("projector: %+v errors %d items %v", s.ProjectorBatch, s.ProjectorErrors, s.ProjectedItems)
	}
	h := s.WALFsync
	if h.Count != 3 || h.Sum < 0.5 || h.Sum > 0.501 {
		t.Fatalf("fsync: count %d sum %v", h.Count, h.Sum)
	}
	last := h.Buckets[len(h.Buckets)-1]
	if last.UpperBound != nil || last.Count != 3 {
		t.Errorf("last bucket %+v, want +Inf with the count", last)
	}
	var prev uint64
	for _, b := range h.Buckets {
		if b.Count < prev {
			t.Fatalf("buckets not cumulative: %+v", h.Buckets)
		}
		prev = b.Count
		if b.UpperBound != nil && *b.UpperBound == 0.0002 && b.Count != 1 {
			t.Errorf("le=0.0002 holds %d, want 1", b.Count)
		}
	}
}

// TestPushItemsFor: the cached counters are PushItems' own children (what
// is added through them is what WithLabelValues and the snapshot read), a
// status never added to is there at 0, and a status outside the cache
// still counts.
func TestPushItemsFor(t *testing.T) {
	zero := func() float64 { return 0 }
	m := New(zero, zero, zero, zero)
	m.PushItemsFor("queued").Add(3)
	m.PushItemsFor("queued").Inc()
	m.PushItems.WithLabelValues("queued").Add(1)
	m.PushItemsFor("duplicate").Add(2)
	m.PushItemsFor("other").Add(7)
	if m.PushItemsFor("queued") != m.PushItems.WithLabelValues("queued") {
		t.Error("PushItemsFor(queued) is not PushItems' child")
	}
	s := m.Snapshot()
	want := map[string]float64{"queued": 5, "duplicate": 2, "other": 7, "buffered": 0, "failed": 0}
	if len(s.PushItems) != len(want) {
		t.Errorf("statuses %v, want %v (buffered and failed never seen: at 0)", s.PushItems, want)
	}
	for k, w := range want {
		if got, ok := s.PushItems[k]; !ok {
			t.Errorf("%s absent, want %v", k, w)
		} else if got != w {
			t.Errorf("%s = %v, want %v", k, got, w)
		}
	}
}

// TestSnapshotBeforeFirstBatch: before any projection batch the projector
// histogram has its buckets, all at zero, as the fsync histogram does
// (it had none: an empty list beside a full one).
func TestSnapshotBeforeFirstBatch(t *testing.T) {
	zero := func() float64 { return 0 }
	s := New(zero, zero, zero, zero).Snapshot()
	for name, h := range map[string]Histogram{"projector": s.ProjectorBatch, "fsync": s.WALFsync} {
		if len(h.Buckets) < 2 || h.Count != 0 || h.Buckets[len(h.Buckets)-1].UpperBound != nil {
			t.Errorf("%s: %+v, want zero buckets ending in +Inf", name, h)
		}
	}
}
