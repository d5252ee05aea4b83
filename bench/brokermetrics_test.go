package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestPipelineFigures: two /metrics answers in the broker's format, read
// by readPipeline, give the mean stage times, the mean transaction and its
// items, and the projector's busy share of the wall time between them; a
// broker without the stage histogram leaves the stage figures at zero.
func TestPipelineFigures(t *testing.T) {
	page := func(walSum, walN, projSum, projN, batchSum, batchN, items float64, stages bool) string {
		s := ""
		if stages {
			s += fmt.Sprintf(`# HELP queen_push_stage_seconds x
# TYPE queen_push_stage_seconds histogram
queen_push_stage_seconds_bucket{stage="projection",le="+Inf"} %[4]g
queen_push_stage_seconds_sum{stage="projection"} %[3]g
queen_push_stage_seconds_count{stage="projection"} %[4]g
queen_push_stage_seconds_bucket{stage="wal",le="+Inf"} %[2]g
queen_push_stage_seconds_sum{stage="wal"} %[1]g
queen_push_stage_seconds_count{stage="wal"} %[2]g
`, walSum, walN, projSum, projN)
		}
		return s + fmt.Sprintf(`# HELP queen_projector_batch_seconds x
# TYPE queen_projector_batch_seconds histogram
queen_projector_batch_seconds_bucket{outcome="error",le="+Inf"} 3
queen_projector_batch_seconds_sum{outcome="error"} 9
queen_projector_batch_seconds_count{outcome="error"} 3
queen_projector_batch_seconds_bucket{outcome="ok",le="+Inf"} %[2]g
queen_projector_batch_seconds_sum{outcome="ok"} %[1]g
queen_projector_batch_seconds_count{outcome="ok"} %[2]g
# HELP queen_projector_batch_items x
# TYPE queen_projector_batch_items histogram
queen_projector_batch_items_bucket{le="+Inf"} %[2]g
queen_projector_batch_items_sum %[3]g
queen_projector_batch_items_count %[2]g
`, batchSum, batchN, items)
	}
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }))
	defer srv.Close()
	read := func(p string, at time.Time) pipelineSample {
		t.Helper()
		body = p
		s, err := readPipeline(context.Background(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		s.at = at
		return s
	}
	t0 := time.Now()
	// 1,000 pushes of 2 ms (wal) and 6 ms (projection); 100 transactions
	// of 30 ms holding 200 items each, over 4 s of wall time.
	before := read(page(1, 10, 3, 10, 0.5, 5, 1000, true), t0)
	after := read(page(3, 1010, 9, 1010, 3.5, 105, 21000, true), t0.Add(4*time.Second))
	f := pipelineFigures(before, after)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"wal ms", f.PushWALMs, 2}, {"projection ms", f.PushProjectionMs, 6}, {"transaction ms", f.BatchMs, 30},
		{"items", f.BatchItems, 200}, {"busy", f.ProjectorBusy, 0.75}} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	before = read(page(0, 0, 0, 0, 0.5, 5, 1000, false), t0)
	after = read(page(0, 0, 0, 0, 3.5, 105, 21000, false), t0.Add(4*time.Second))
	if f := pipelineFigures(before, after); f.PushWALMs != 0 || f.PushProjectionMs != 0 || f.BatchMs != 30 {
		t.Errorf("without the stage histogram: %+v", f)
	}
}
