package ingest

import (
	"errors"
	"fmt"
	"testing"
)

// TestCheckPartitions: a push may name at most max distinct (queue,
// partition) pairs, however many items it has; max <= 0 is no limit.
func TestCheckPartitions(t *testing.T) {
	items := func(n, parts int) []ParsedItem {
		out := make([]ParsedItem, n)
		for i := range out {
			out[i] = ParsedItem{Queue: "q", Partition: fmt.Sprint(i % parts)}
		}
		return out
	}
	for _, tt := range []struct {
		n, parts, max int
		ok            bool
	}{
		{1000, 1000, 1000, true},
		{1001, 1001, 1000, false},
		{5000, 10, 1000, true},
		{5000, 1000, 1000, true},
		{5000, 1001, 1000, false},
		{5000, 5000, 0, true},
	} {
		err := CheckPartitions(items(tt.n, tt.parts), tt.max)
		var verr *ValidationError
		if (err == nil) != tt.ok || (err != nil && !errors.As(err, &verr)) {
			t.Errorf("%d items over %d partitions, max %d: %v", tt.n, tt.parts, tt.max, err)
		}
	}
	// Same partition name in two queues: two pairs.
	two := []ParsedItem{{Queue: "a", Partition: "p"}, {Queue: "b", Partition: "p"}}
	if CheckPartitions(two, 1) == nil {
		t.Error("two queues' partition p counted once")
	}
}
