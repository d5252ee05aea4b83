package fastapi

import (
	"strings"
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

// TestParseTimestampRange: a time is accepted up to the last nanosecond of
// year 9999 and from the first of year 1, in UTC after its zone is
// applied; a zone that carries it past either end (a five-digit year or
// year 0 in the answers that echo it) is refused with errTimestampRange,
// as is a literal year 0000.
func TestParseTimestampRange(t *testing.T) {
	for s, want := range map[string]time.Time{
		"9999-12-31T23:59:59.999999999Z":      time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"9999-12-31T09:59:59.999999999-14:00": time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		"9999-12-31 23:59:59.999999999+0100":  time.Date(9999, 12, 31, 22, 59, 59, 999999999, time.UTC),
		"9999-12-31":                          time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		"0001-01-01T00:00:00Z":                time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		"0001-01-01T13:59:59-14:00":           time.Date(1, 1, 2, 3, 59, 59, 0, time.UTC),
		"0001-01-01T14:00:00+14:00":           time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		"0001-01-01":                          time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		got, err := parseTimestamp(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
		if y := len(got.UTC().Format("2006")); y != 4 {
			t.Errorf("%q writes a %d-digit year", s, y)
		}
	}
	for _, s := range []string{
		"9999-12-31T23:59:59.999999999-00:01", "9999-12-31T10:00:00-14:00", "9999-12-31T23:59:59.999999999-14:00",
		"9999-12-31T23:30:00-01", "9999-12-31T23:30:00-0100",
		"0001-01-01T13:59:59.999999999+14:00", "0001-01-01T00:00:00+00:01", "0001-01-01T00:00:00+14",
		"0001-01-01 00:00:00+0100", "0000-12-31T23:59:59Z", "0000-01-01",
	} {
		if got, err := parseTimestamp(s); err != errTimestampRange {
			t.Errorf("%q: %v, %v; want errTimestampRange", s, got, err)
		}
	}
	if !strings.Contains(errTimestampRange.Error(), "0001-01-01T00:00:00Z") || !strings.Contains(errTimestampRange.Error(), "9999-12-31T23:59:59.999999999Z") {
		t.Errorf("errTimestampRange does not name the range: %v", errTimestampRange)
	}
}

// FuzzParseTimestamp: any input is parsed or refused without a panic, and
// what is accepted is in years 1..9999 and, written back as RFC 3339,
// parses to the same instant.
func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{"2025-01-02T03:04:05Z", "2025-01-02 03:04:05.123+01", "2025-01-02", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTimestamp(s)
		if err != nil {
			return
		}
		if y := got.UTC().Year(); y < 1 || y > 9999 {
			t.Fatalf("%q parsed as %v, outside years 1..9999", s, got)
		}
		again, err := parseTimestamp(got.Format(time.RFC3339Nano))
		if err != nil || !again.Equal(got) {
			t.Fatalf("%q parsed as %v, which does not parse back (%v, %v)", s, got, again, err)
		}
	})
}
