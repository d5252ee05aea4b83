package fastapi

import (
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

func TestBucketMinutes(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 1}, {time.Hour, 1}, {time.Hour + time.Minute, 5}, {6 * time.Hour, 5}, {7 * time.Hour, 15},
		{24 * time.Hour, 15}, {25 * time.Hour, 60}, {7 * 24 * time.Hour, 60}, {8 * 24 * time.Hour, 360},
	} {
		if got := bucketMinutes(tc.d); got != tc.want {
			t.Errorf("bucketMinutes(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestBuckets: every bucket of the range is present, oldest first, aligned
// to the width; counts land on their bucket, the rest are 0.
func TestBuckets(t *testing.T) {
	from := time.Date(2025, 1, 2, 10, 2, 30, 0, time.UTC)
	to := time.Date(2025, 1, 2, 10, 17, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return time.Date(2025, 1, 2, h, m, 0, 0, time.UTC) }
	got := buckets([]pg.Bucket{{Start: at(10, 5), Messages: 7}, {Start: at(10, 15), Messages: 2}}, from, to, 5*time.Minute)
	want := []pg.Bucket{{Start: at(10, 0)}, {Start: at(10, 5), Messages: 7}, {Start: at(10, 10)}, {Start: at(10, 15), Messages: 2}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Start.Equal(want[i].Start) || got[i].Messages != want[i].Messages {
			t.Fatalf("bucket %d = %v, want %v", i, got[i], want[i])
		}
	}
	if n := len(buckets(nil, from, from, time.Minute)); n != 1 {
		t.Fatalf("an empty range has %d buckets, want 1", n)
	}
}

func TestPerSecond(t *testing.T) {
	if got := perSecond(100, time.Minute); got != 1.67 {
		t.Fatalf("perSecond(100, 1m) = %v, want 1.67", got)
	}
	if got := perSecond(0, time.Minute); got != 0 {
		t.Fatalf("perSecond(0) = %v", got)
	}
}
