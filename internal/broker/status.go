package broker

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/queenmq/queen-go/fastapi"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/pg"
)

// BufferStatus implements fastapi.StatusSource: the projector's backlog,
// the acceptance time of the oldest unprojected record (one WAL read) and,
// for a backlog of at most fastapi.BufferItemsLimit records, their items
// (one WAL read each).
func (b *Broker) BufferStatus() fastapi.BufferStatus {
	cp, durable := b.Projector.Checkpoint(), b.WAL.DurableIndex()
	st := fastapi.BufferStatus{
		Records:       b.Projector.Backlog(),
		DBHealthy:     b.Projector.Healthy(),
		BufferHealthy: b.walHealthy.Load(),
		Paused:        b.Maintenance.PushEnabled(),
		Checkpoint:    cp,
		DurableIndex:  durable,
		WALBytes:      b.WAL.Size(),
	}
	if st.Records == 0 {
		zero := int64(0)
		st.Items = &zero
		return st
	}
	count := st.Records <= fastapi.BufferItemsLimit
	var items int64
	for i := cp + 1; i <= durable; i++ {
		var at int64
		var n int
		err := b.WAL.View(i, func(p []byte) (err error) {
			at, n, err = ingest.RecordHeader(p)
			return err
		})
		if err != nil {
			// Projected and truncated meanwhile, unreadable, or not a
			// push record: what was read stands, the count is not known.
			count = false
			break
		}
		if i == cp+1 {
			t := time.UnixMicro(at).UTC()
			st.OldestAcceptedAt = &t
		}
		if !count {
			break
		}
		items += int64(n)
	}
	if count {
		st.Items = &items
	}
	return st
}

// ProcessSample implements fastapi.StatusSource.
func (b *Broker) ProcessSample() fastapi.ProcessSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p := fastapi.ProcessSample{BrokerID: b.ID.String(), HeapBytes: ms.HeapInuse,
		Goroutines: runtime.NumGoroutine(), Pool: b.status.Pool()}
	p.Hostname, _ = os.Hostname()
	if b.ln != nil {
		if a, ok := b.ln.Addr().(*net.TCPAddr); ok {
			p.Port = a.Port
		}
	}
	p.RSSBytes, p.VirtualBytes = procMemory()
	return p
}

// procMemory reads the process's resident and virtual size from
// /proc/self/statm (Linux); 0, 0 elsewhere or on error.
func procMemory() (rss, virtual int64) {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0, 0
	}
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	res, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0
	}
	page := int64(os.Getpagesize())
	return res * page, size * page
}

// PopFiltered implements fastapi.FilteredPopper (pg.FilteredPop.Pop).
func (b *Broker) PopFiltered(ctx context.Context, req pg.FilteredPopRequest) (*pg.PopResult, error) {
	if err := b.Store.EnsureSchema(ctx); err != nil {
		return nil, err
	}
	res, err := b.filtered.Pop(ctx, req)
	if err == nil {
		b.Metrics.Popped.Add(float64(len(res.Messages)))
	}
	return res, err
}

// MatchingQueues implements fastapi.FilteredPopper.
func (b *Broker) MatchingQueues(ctx context.Context, namespace, task string) ([]string, error) {
	return b.filtered.MatchingQueues(ctx, namespace, task)
}
