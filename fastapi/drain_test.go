package fastapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/ingest"
)

// drainPusher stands in for the pipeline: Push waits until Drain, then
// answers its one item buffered; it records whether the context it got
// could end.
type drainPusher struct {
	entered chan struct{}
	drained chan struct{}
	ctxDone chan bool
}

func (p *drainPusher) Push(ctx context.Context, _ []byte, _ *string) ([]ingest.Result, error) {
	p.ctxDone <- ctx.Done() != nil
	close(p.entered)
	<-p.drained
	return []ingest.Result{{Index: 0, MessageID: "m", TransactionID: "m", QueueName: "q", Status: ingest.StatusBuffered}}, nil
}

func (p *drainPusher) Drain() { close(p.drained) }

// TestShutdownDrainsPushes: the push handler hands the pipeline a context
// that does not end (the wait is a plain receive), and Shutdown answers
// the waiting push through Pusher.Drain, before it waits for the request.
func TestShutdownDrainsPushes(t *testing.T) {
	t.Parallel()
	p := &drainPusher{entered: make(chan struct{}), drained: make(chan struct{}), ctxDone: make(chan bool, 1)}
	d := fullDeps()
	d.Pusher = p
	s, err := New(Config{}, d)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	type answer struct {
		status int
		body   string
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + ln.Addr().String() + "/api/v1/push")
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyString(`{"items":[{"queue":"q","payload":1}]}`)
		err := fasthttp.DoTimeout(req, resp, 10*time.Second)
		got <- answer{resp.StatusCode(), string(resp.Body()), err}
	}()
	select {
	case <-p.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the push never reached the pipeline")
	}
	if <-p.ctxDone {
		t.Error("the push's context can end: its wait would select on the server's done channel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	a := <-got
	if a.err != nil || a.status != fasthttp.StatusCreated || !strings.Contains(a.body, `"status":"buffered"`) {
		t.Fatalf("push answered %d %q, %v; want 201 buffered", a.status, a.body, a.err)
	}
}
