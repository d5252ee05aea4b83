package ingest

import (
	"runtime"
	"strings"
	"testing"
)

// TestParseRepeatedItemsBounded: a body that repeats "items" (the last
// one counts) with a long transactionId in each allocates about what it
// holds, not a fresh transactionId buffer sized for the rest of the body
// per repeat (which took 60 times the body before the buffer was sized
// once per body).
func TestParseRepeatedItemsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for range 1000 {
		b.WriteString(`"items":[{"queue":"q","payload":1,"transactionId":"` + strings.Repeat("k", 1000) + `"}],`)
	}
	b.WriteString(`"items":[{"queue":"q","payload":1}]}`)
	body := []byte(b.String())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	items, err := ParseBody(body)
	runtime.ReadMemStats(&after)
	if err != nil || len(items) != 1 || items[0].TransactionID != "" {
		t.Fatalf("ParseBody: %d items, %v", len(items), err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*uint64(len(body)) {
		t.Fatalf("parsing a %d-byte body allocated %d bytes", len(body), got)
	}
}
