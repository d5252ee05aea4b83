package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	json "github.com/goccy/go-json"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/queen-go/pg"
)

// PartitionsReport is what a many-partitions scenario (KindPartitions)
// measured besides the pushes.
type PartitionsReport struct {
	// Prebuilt is the partitions p0…p<Prebuilt-1> inserted into
	// queen.partitions by SQL before the measured phase, and PrebuildSec
	// how long that took (insert, ANALYZE and CHECKPOINT).
	Prebuilt    int     `json:"prebuilt"`
	PrebuildSec float64 `json:"prebuild_s"`
	// Before and After are the queue's partitions (its Default partition
	// included) at the start of the pushes and after the projector caught
	// up; Created is After − Before, CreatedPerSec that over the pushes'
	// wall time.
	Before        int64   `json:"before"`
	After         int64   `json:"after"`
	Created       int64   `json:"created"`
	CreatedPerSec float64 `json:"created_per_s"`
	// Want is the partitions the pushes had to create: one per accepted
	// item with fresh partitions, none without.
	Want int64 `json:"want"`
	// Problem says why Created is not Want.
	Problem string `json:"problem,omitempty"`
}

// OK reports whether the pushes created exactly the partitions they had to.
func (p *PartitionsReport) OK() bool { return p.Problem == "" }

// prebuildPartitions creates queue (POST /api/v1/configure, which also
// makes its Default partition) and n partitions p0…p<n-1> in one INSERT
// from generate_series, then ANALYZEs queen.partitions (a long-lived
// database has statistics for it) and CHECKPOINTs (so that the insert's
// checkpoint does not land in the measured phase).
func prebuildPartitions(ctx context.Context, st *Stack, queue string, n int) (*PartitionsReport, error) {
	rep := &PartitionsReport{Prebuilt: n}
	t0 := time.Now()
	if err := configureQueue(ctx, st.URL, queue); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, st.PGURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO queen.partitions (queue_id, name)
		SELECT q.id, 'p' || g FROM queen.queues q, generate_series(0, $2::int - 1) g WHERE q.name = $1`, queue, n); err != nil {
		return nil, fmt.Errorf("bench: pre-build %d partitions: %w", n, err)
	}
	for _, sql := range []string{`ANALYZE queen.partitions`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", sql, err)
		}
	}
	rep.PrebuildSec = time.Since(t0).Seconds()
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue).Scan(&rep.Before); err != nil {
		return nil, err
	}
	return rep, nil
}

// count reads the queue's partitions after the pushes and checks them
// against what the run r had to create.
func (p *PartitionsReport) count(ctx context.Context, store *pg.Store, queue string, r *Report) error {
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1`, queue).Scan(&p.After); err != nil {
		return err
	}
	p.Created = p.After - p.Before
	if r.WallSec > 0 {
		p.CreatedPerSec = float64(p.Created) / r.WallSec
	}
	if r.Ledger.FreshPartitions {
		p.Want = r.Status.Queued + r.Status.Buffered
	}
	// Items without a usable answer may or may not have made theirs.
	if p.Created < p.Want || p.Created > p.Want+r.ErrorItems {
		p.Problem = fmt.Sprintf("the pushes created %d partitions, want %d", p.Created, p.Want)
	}
	return nil
}

func (p *PartitionsReport) writeText(w io.Writer) {
	var b []byte
	b = fmt.Appendf(b, "pre-built partitions: %d in %.1f s; partitions before/after %d/%d: %d created, %.0f/s\n",
		p.Prebuilt, p.PrebuildSec, p.Before, p.After, p.Created, p.CreatedPerSec)
	_, _ = w.Write(b)
}

// configureQueue creates queue with default options (POST
// /api/v1/configure).
func configureQueue(ctx context.Context, base, queue string) error {
	body, err := json.Marshal(map[string]string{"queue": queue})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/configure", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: configure %s: %w", queue, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: configure %s: %s: %s", queue, resp.Status, rb)
	}
	return nil
}
