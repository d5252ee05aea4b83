package fastapi

import (
	"errors"
	"strings"
	"time"
)

// timestampLayouts are the forms parseTimestamp accepts, tried in order.
// Fractional seconds are optional in each (Go's ".999999999").
var timestampLayouts = []string{
	time.RFC3339Nano,                     // 2025-01-02T03:04:05.123Z, +01:00
	"2006-01-02T15:04:05.999999999Z0700", // +0100
	"2006-01-02T15:04:05.999999999Z07",   // +01
	"2006-01-02T15:04:05.999999999",      // no zone: UTC
	"2006-01-02T15:04",                   // no seconds, no zone: UTC
	"2006-01-02",                         // a date alone: midnight UTC
}

// errTimestamp is the 400 text for a timestamp none of the layouts read.
var errTimestamp = errors.New("must be an ISO 8601 timestamp such as 2025-01-02T03:04:05Z (a date alone or no zone means UTC)")

// errTimestampRange is the 400 text for a timestamp that reads but falls
// outside years 0001..9999 once its zone is applied.
var errTimestampRange = errors.New("must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z (after applying its zone)")

// parseTimestamp reads a client-supplied timestamp (subscriptionFrom, seek
// and subscription timestamps). Queen handed these strings to PostgreSQL's
// timestamptz input, so clients send more than strict RFC 3339: besides it,
// a space instead of "T", a zone as +hhmm or +hh, no zone at all (taken as
// UTC) and a date alone (midnight UTC) are accepted. Anything else returns
// errTimestamp.
//
// The year is read as four digits, but a zone can still carry the instant
// out of years 1..9999 in UTC (9999-12-31T23:59:59-14:00 is
// 10000-01-01T13:59:59Z; 0001-01-01T00:00:00+14:00 is in year 0, as is a
// literal 0000-01-01, which PostgreSQL refused for Queen): such a time
// returns errTimestampRange, since the answers that echo it (seek,
// subscription, consumer groups, a status range's to) would write a
// five-digit year or year 0, which most clients' date parsers refuse.
func parseTimestamp(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	for _, l := range timestampLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			if y := t.UTC().Year(); y < 1 || y > 9999 {
				return time.Time{}, errTimestampRange
			}
			return t, nil
		}
	}
	return time.Time{}, errTimestamp
}
