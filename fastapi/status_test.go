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

// TestBucketsBefore1970: buckets round down to their width before the Unix
// epoch as after it (as the SQL's floor places the counts), so a range
// across 1970 or before it has every bucket holding part of it, oldest
// first, none after to, and the counts of the pre-1970 buckets land.
func TestBucketsBefore1970(t *testing.T) {
	at := func(y int, mo time.Month, d, h, m, s int) time.Time { return time.Date(y, mo, d, h, m, s, 0, time.UTC) }
	for _, tc := range []struct {
		name     string
		from, to time.Time
		width    time.Duration
		counts   []pg.Bucket
		want     []pg.Bucket
	}{
		{"hours across 1970", at(1969, 12, 31, 22, 30, 0), at(1970, 1, 1, 0, 30, 0), time.Hour,
			[]pg.Bucket{{Start: at(1969, 12, 31, 22, 0, 0), Messages: 3}, {Start: at(1970, 1, 1, 0, 0, 0), Messages: 1}},
			[]pg.Bucket{{Start: at(1969, 12, 31, 22, 0, 0), Messages: 3}, {Start: at(1969, 12, 31, 23, 0, 0)}, {Start: at(1970, 1, 1, 0, 0, 0), Messages: 1}}},
		{"minutes across 1970", at(1969, 12, 31, 23, 58, 30), at(1970, 1, 1, 0, 0, 30), time.Minute,
			[]pg.Bucket{{Start: at(1969, 12, 31, 23, 58, 0), Messages: 2}},
			[]pg.Bucket{{Start: at(1969, 12, 31, 23, 58, 0), Messages: 2}, {Start: at(1969, 12, 31, 23, 59, 0)}, {Start: at(1970, 1, 1, 0, 0, 0)}}},
		{"within a minute before 1970", at(1969, 12, 31, 23, 59, 30), at(1969, 12, 31, 23, 59, 50), time.Minute, nil,
			[]pg.Bucket{{Start: at(1969, 12, 31, 23, 59, 0)}}},
		{"days in 1969", at(1969, 7, 20, 20, 17, 0), at(1969, 7, 22, 0, 0, 0), 24 * time.Hour, nil,
			[]pg.Bucket{{Start: at(1969, 7, 20, 0, 0, 0)}, {Start: at(1969, 7, 21, 0, 0, 0)}, {Start: at(1969, 7, 22, 0, 0, 0)}}},
		{"6 hours from year 1", at(1, 1, 1, 0, 0, 0), at(1, 1, 1, 7, 0, 0), 6 * time.Hour, nil,
			[]pg.Bucket{{Start: at(1, 1, 1, 0, 0, 0)}, {Start: at(1, 1, 1, 6, 0, 0)}}},
		{"ordinary hours", at(2025, 1, 2, 10, 30, 0), at(2025, 1, 2, 12, 0, 0), time.Hour,
			[]pg.Bucket{{Start: at(2025, 1, 2, 11, 0, 0), Messages: 4}},
			[]pg.Bucket{{Start: at(2025, 1, 2, 10, 0, 0)}, {Start: at(2025, 1, 2, 11, 0, 0), Messages: 4}, {Start: at(2025, 1, 2, 12, 0, 0)}}},
	} {
		got := buckets(tc.counts, tc.from, tc.to, tc.width)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range tc.want {
			if !got[i].Start.Equal(tc.want[i].Start) || got[i].Messages != tc.want[i].Messages {
				t.Errorf("%s: bucket %d = %v, want %v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestFloorTo(t *testing.T) {
	for _, tc := range [][3]int64{{0, 60, 0}, {59, 60, 0}, {60, 60, 60}, {-1, 60, -60}, {-60, 60, -60}, {-61, 60, -120}, {-90, 60, -120}} {
		if got := floorTo(tc[0], tc[1]); got != tc[2] {
			t.Errorf("floorTo(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
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
