package fastapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/queenmq/queen-go/pg"
)

// TestAppendStateRows: state/get's answer, built directly, is the JSON
// that encoding the rows as maps gave: keys escaped (quotes, control
// characters, HTML characters, non-ASCII), values as stored, times in
// stateTimeLayout, and an empty list.
func TestAppendStateRows(t *testing.T) {
	at := time.Date(2026, 12, 7, 19, 58, 1, 234000000, time.FixedZone("x", 3600))
	rows := []pg.StateRow{
		{Key: "plain", Value: []byte(`{"n":1,"s":"x"}`), UpdatedAt: at},
		{Key: "q\"uote\\ <&> \u00e9\u0001", Value: []byte(`[1, 2, {"a": null}]`), UpdatedAt: at.Add(time.Second)},
		{Key: "s", Value: []byte(`"text"`), UpdatedAt: at},
	}
	for _, rs := range [][]pg.StateRow{rows, nil} {
		var got, want any
		if err := json.Unmarshal(appendStateRows(nil, rs), &got); err != nil {
			t.Fatalf("answer is not JSON: %v: %s", err, appendStateRows(nil, rs))
		}
		out := make([]map[string]any, len(rs))
		for i, r := range rs {
			out[i] = map[string]any{"key": r.Key, "value": json.RawMessage(r.Value), "updated_at": r.UpdatedAt.UTC().Format(stateTimeLayout)}
		}
		b, _ := json.Marshal(map[string]any{"success": true, "rows": out})
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("answer %v, want %v", got, want)
		}
	}
}
