package fastapi

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
)

// TestListingGate: no more than the gate's turns run at once; a request
// that finds every turn taken waits for one, and past the wait is
// answered 503 with Retry-After, its handler never run.
func TestListingGate(t *testing.T) {
	s := &Server{listingTurns: make(chan struct{}, 2), listingWait: 200 * time.Millisecond}
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	h := s.listingGate(func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		ctx.SetStatusCode(fasthttp.StatusOK)
	})
	ctxs := make([]*fasthttp.RequestCtx, 3)
	var wg sync.WaitGroup
	for i := range ctxs {
		ctxs[i] = new(fasthttp.RequestCtx)
		wg.Add(1)
		go func() { defer wg.Done(); h(ctxs[i]) }()
	}
	time.Sleep(50 * time.Millisecond)
	close(release) // the two running end; the third takes a freed turn
	wg.Wait()
	for i, c := range ctxs {
		if c.Response.StatusCode() != fasthttp.StatusOK {
			t.Errorf("request %d: %d, want 200 after waiting for a turn", i, c.Response.StatusCode())
		}
	}
	if most != 2 {
		t.Errorf("%d ran at once, want 2", most)
	}

	// Both turns held past the wait: 503, handler not run.
	block := make(chan struct{})
	held := s.listingGate(func(*fasthttp.RequestCtx) { <-block })
	for range 2 {
		go held(new(fasthttp.RequestCtx))
	}
	time.Sleep(50 * time.Millisecond)
	var late fasthttp.RequestCtx
	ran := false
	s.listingGate(func(*fasthttp.RequestCtx) { ran = true })(&late)
	close(block)
	if ran || late.Response.StatusCode() != fasthttp.StatusServiceUnavailable ||
		string(late.Response.Header.Peek(fasthttp.HeaderRetryAfter)) != "1" ||
		string(late.Response.Body()) != `{"error":"busy: 2 listing requests are running (at most DB_POOL_SIZE/4 at once); retry"}` {
		t.Errorf("no turn: ran %v, %d %s", ran, late.Response.StatusCode(), late.Response.Body())
	}
}

// TestListingGateRoutes: with every turn held, a listing route (and the
// single-message delete) waits and is answered "busy", while the filtered pop (GET /api/v1/pop, a pop, not
// a listing) is served at once. Both requests are ones their handlers
// refuse before any database work, so the Server needs no dependencies.
func TestListingGateRoutes(t *testing.T) {
	s := &Server{listingTurns: make(chan struct{}, 1), listingWait: 50 * time.Millisecond}
	r := router.New()
	s.routeStatus(r, listingRoutes{r, s})
	s.listingTurns <- struct{}{} // the one turn, held
	get := func(uri string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		r.Handler(&ctx)
		return &ctx
	}
	if c := get("/api/v1/pop"); c.Response.StatusCode() != fasthttp.StatusBadRequest {
		t.Errorf("filtered pop with the gate full: %d %s, want its own 400 at once", c.Response.StatusCode(), c.Response.Body())
	}
	if c := get("/api/v1/status?from=nonsense"); c.Response.StatusCode() != fasthttp.StatusServiceUnavailable {
		t.Errorf("status with the gate full: %d %s, want 503 busy", c.Response.StatusCode(), c.Response.Body())
	}
	// The single-message delete may scan a partition: it takes a turn too.
	s.routeStreams(r)
	var del fasthttp.RequestCtx
	del.Request.SetRequestURI("/api/v1/messages/not-a-uuid/tx")
	del.Request.Header.SetMethod(fasthttp.MethodDelete)
	r.Handler(&del)
	if del.Response.StatusCode() != fasthttp.StatusServiceUnavailable {
		t.Errorf("message delete with the gate full: %d %s, want 503 busy", del.Response.StatusCode(), del.Response.Body())
	}
	// A stream state read is a listing; a cycle and a seek take the heavy
	// writes' turns, held here too.
	s.heavyWriteTurns = make(chan struct{}, 1)
	s.heavyWriteTurns <- struct{}{}
	s.routeResources(listingRoutes{r, s})
	post := func(uri string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(uri)
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.SetBodyString("{}")
		r.Handler(&ctx)
		return &ctx
	}
	for uri, want := range map[string]string{
		"/streams/v1/state/get":                                "listing requests",
		"/streams/v1/cycle":                                    "stream cycles and seeks",
		"/api/v1/consumer-groups/g/queues/q/seek":              "stream cycles and seeks",
		"/api/v1/consumer-groups/g/queues/q/partitions/p/seek": "stream cycles and seeks",
	} {
		c := post(uri)
		if c.Response.StatusCode() != fasthttp.StatusServiceUnavailable || !strings.Contains(string(c.Response.Body()), want) {
			t.Errorf("%s with the gates full: %d %s, want 503 naming %s", uri, c.Response.StatusCode(), c.Response.Body(), want)
		}
	}
}

// TestFilteredRecheckJitter: a waiting filtered pop's recheck sleep is
// filteredRecheck ± 25%, and not the same every time.
func TestFilteredRecheckJitter(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := filteredRecheckAfter()
		if d < filteredRecheck*3/4 || d >= filteredRecheck*5/4 {
			t.Fatalf("recheck after %v, want within ±25%% of %v", d, filteredRecheck)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct sleeps in 1000", len(seen))
	}
}
