package fastapi

import (
	"testing"
	"time"
)

// TestParseTimestamp: the forms PostgreSQL's timestamptz input read for
// Queen are accepted (a missing zone is UTC), anything else is refused.
func TestParseTimestamp(t *testing.T) {
	want := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []string{
		"2025-01-02T03:04:05Z", "2025-01-02T03:04:05.000Z", "2025-01-02T04:04:05+01:00",
		"2025-01-02T04:04:05+0100", "2025-01-02T04:04:05+01", "2025-01-02T03:04:05",
		"2025-01-02 03:04:05", "2025-01-02 03:04:05Z", " 2025-01-02T03:04:05Z ",
	} {
		got, err := parseTimestamp(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	if got, err := parseTimestamp("2025-01-02"); err != nil || !got.Equal(time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a date alone: %v, %v", got, err)
	}
	for _, s := range []string{"", "now", "yesterday", "2025-13-01", "2025-01-02T25:00:00Z", "1735787045", "2025/01/02"} {
		if _, err := parseTimestamp(s); err == nil {
			t.Errorf("%q was accepted", s)
		}
	}
}

// FuzzParseTimestamp: any input is parsed or refused without a panic, and
// what is accepted, written back as RFC 3339, parses to the same instant.
func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{"2025-01-02T03:04:05Z", "2025-01-02 03:04:05.123+01", "2025-01-02", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTimestamp(s)
		if err != nil {
			return
		}
		again, err := parseTimestamp(got.Format(time.RFC3339Nano))
		if err != nil || !again.Equal(got) {
			t.Fatalf("%q parsed as %v, which does not parse back (%v, %v)", s, got, again, err)
		}
	})
}
