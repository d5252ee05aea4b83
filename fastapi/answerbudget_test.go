package fastapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/pg"
)

// TestAnswerBudgetGrant: a pop's bound is QUEEN_MAX_POP_BYTES while the
// answers pending leave that much of the budget, else the largest power of
// two they leave, not below popFloorBytes; one message when they leave
// less than the floor. A grant holds nothing back.
func TestAnswerBudgetGrant(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, c := range []struct {
		name          string
		limit, maxPop int64
		pending       int64
		wantBytes     int64
		wantOne       bool
	}{
		{"empty budget: the full bound", 64 * mib, 16 * mib, 0, 16 * mib, false},
		{"the full bound left", 64 * mib, 16 * mib, 48 * mib, 16 * mib, false},
		{"what is left, as a power of two", 64 * mib, 16 * mib, 53 * mib, 8 * mib, false},
		{"just the floor left", 64 * mib, 16 * mib, 64*mib - popFloorBytes, popFloorBytes, false},
		{"answers hold it: one message", 64 * mib, 16 * mib, 64*mib - 1, popFloorBytes, true},
		{"answers over it: one message", 64 * mib, 16 * mib, 80 * mib, popFloorBytes, true},
		{"a budget under the bound, nothing pending: a power of two", 10 * mib, 16 * mib, 0, 8 * mib, false},
		{"a budget under the floor, nothing pending: the floor", 1000, 16 * mib, 0, popFloorBytes, false},
		{"a bound under the floor", 64 * mib, 1000, 0, 1000, false},
		{"a bound under the floor, answers hold it", 64 * mib, 1000, 64*mib - 999, 1000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAnswerBudget(c.limit, c.maxPop)
			b.pending.Store(c.pending)
			for range 3 { // grants hold nothing back: the same every time
				g := b.grant()
				if g.maxBytes != c.wantBytes || g.one != c.wantOne {
					t.Fatalf("grant %+v; want maxBytes %d, one %v", g, c.wantBytes, c.wantOne)
				}
			}
			if p := b.usage(); p != c.pending {
				t.Fatalf("after the grants: pending %d; want %d", p, c.pending)
			}
			if ones := b.ones.Load(); (ones == 3) != c.wantOne || (ones != 0) != c.wantOne {
				t.Fatalf("one-message count %d", ones)
			}
		})
	}
}

// TestAnswerBudgetGrantConcurrent: pops granted together all get the same
// bound while nothing is pending, however many there are (pg combines only
// concurrent pops of one bound).
func TestAnswerBudgetGrantConcurrent(t *testing.T) {
	t.Parallel()
	b := newAnswerBudget(64<<20, 16<<20)
	var wg sync.WaitGroup
	var other atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if g := b.grant(); g.maxBytes != 16<<20 || g.one {
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := other.Load(); n != 0 {
		t.Fatalf("%d of 5,000 concurrent grants were not the full bound", n)
	}
}

// TestAnswerBudgetAdmit: an answer is taken when it fits beside the
// answers pending or when none is, counted once, and given back.
func TestAnswerBudgetAdmit(t *testing.T) {
	t.Parallel()
	b := newAnswerBudget(1000, 600)
	// Alone, an answer over the whole budget is taken.
	if ok, _ := b.admit(1500); !ok {
		t.Fatal("the only answer was refused")
	}
	if p := b.usage(); p != 1500 {
		t.Fatalf("pending %d; want 1500", p)
	}
	// Beside it, nothing more fits: refused, with no room, and nothing
	// counted.
	if ok, room := b.admit(10); ok || room != 0 {
		t.Fatalf("admit beside an answer over the budget: %v, room %d", ok, room)
	}
	b.add(10) // taken anyway
	b.release(1500)
	if p := b.usage(); p != 10 {
		t.Fatalf("pending %d; want 10", p)
	}
	if ok, _ := b.admit(990); !ok {
		t.Fatal("an answer that fits beside another was refused")
	}
	if ok, room := b.admit(1); ok || room != 0 {
		t.Fatalf("admit past the limit: %v, room %d", ok, room)
	}
	b.release(990)
	if ok, room := b.admit(991); ok || room != 990 {
		t.Fatalf("admit of 991 beside 10 pending: %v, room %d; want refused with room 990", ok, room)
	}
	b.add(5)
	b.release(15)
	if p := b.usage(); p != 0 {
		t.Fatalf("at the end: pending %d", p)
	}
}

// TestAnswerBudgetAdmitConcurrent: answers admitted together never take
// more than the limit between them (beyond the first, taken alone).
func TestAnswerBudgetAdmitConcurrent(t *testing.T) {
	t.Parallel()
	const limit, n = 1000, 7
	b := newAnswerBudget(limit, 600)
	b.add(1) // not alone: every answer must fit
	var wg sync.WaitGroup
	var taken atomic.Int64
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := b.admit(n); ok {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	if got, want := taken.Load(), int64((limit-1)/n); got != want {
		t.Fatalf("%d answers of %d bytes taken beside 1 byte under a limit of %d; want %d", got, n, limit, want)
	}
}

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	deadlines []time.Time
}

func (c *deadlineConn) SetWriteDeadline(d time.Time) error {
	c.deadlines = append(c.deadlines, d)
	return nil
}

// TestAnswerStream: WriteTo writes the answer in chunks of
// answerChunkBytes, each under a write deadline of the stall timeout, none
// past the total from the first chunk; Close gives the bytes back once
// however often it is called.
func TestAnswerStream(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("0123456789"), answerChunkBytes/4) // 2.5 chunks
	for _, c := range []struct {
		name         string
		stall, total time.Duration
		want         time.Duration // each deadline, from the write
	}{
		{"the stall timeout", time.Hour, 90 * time.Minute, time.Hour},
		{"never past the total", time.Hour, time.Minute, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAnswerBudget(64<<20, 16<<20)
			b.add(int64(len(body)))
			conn := &deadlineConn{}
			a := &answerStream{b: body, budget: b, n: int64(len(body)), conn: conn, stall: c.stall, total: c.total}
			var out bytes.Buffer
			start := time.Now()
			n, err := a.WriteTo(&out)
			end := time.Now()
			if err != nil || n != int64(len(body)) || !bytes.Equal(out.Bytes(), body) {
				t.Fatalf("WriteTo: %d, %v; body intact %v", n, err, bytes.Equal(out.Bytes(), body))
			}
			if len(conn.deadlines) != 3 {
				t.Fatalf("%d write deadlines for 3 chunks", len(conn.deadlines))
			}
			for i, d := range conn.deadlines {
				if d.Before(start.Add(c.want)) || d.After(end.Add(c.want)) {
					t.Errorf("deadline %d: %v after the write began; want %v", i, d.Sub(start), c.want)
				}
			}
			if p := b.usage(); p != int64(len(body)) {
				t.Fatalf("pending %d before Close", p)
			}
			for range 3 {
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if p := b.usage(); p != 0 {
				t.Fatalf("pending %d after Close; want 0", p)
			}
			if m, err := a.Read(make([]byte, 10)); m != 0 || err != io.EOF {
				t.Fatalf("Read after Close: %d, %v", m, err)
			}
		})
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestFasthttpClosesAnswerStream pins what the budget relies on in
// fasthttp (v1.78): a response's body stream is closed once the response
// is written, when its write fails, and when the response is dropped
// unwritten (Reset, as when its connection fails first or the server
// shuts down), and a stream with SupportsBodyWriteTo is written through
// WriteTo.
func TestFasthttpClosesAnswerStream(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte{'x'}, 300<<10)
	for _, c := range []struct {
		name string
		run  func(*fasthttp.Response) error
	}{
		{"written", func(r *fasthttp.Response) error {
			var out bytes.Buffer
			w := bufio.NewWriter(&out)
			if err := r.Write(w); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if !bytes.HasSuffix(out.Bytes(), body) || !bytes.Contains(out.Bytes(), []byte("Content-Length: "+strconv.Itoa(len(body)))) {
				return errors.New("the answer was not written whole with its Content-Length")
			}
			return nil
		}},
		{"write failed", func(r *fasthttp.Response) error {
			if err := r.Write(bufio.NewWriterSize(failWriter{}, 4096)); err == nil {
				return errors.New("a write to a failing connection succeeded")
			}
			return nil
		}},
		{"dropped unwritten", func(r *fasthttp.Response) error { r.Reset(); return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAnswerBudget(64<<20, 16<<20)
			b.add(int64(len(body)))
			a := &answerStream{b: body, budget: b, n: int64(len(body))}
			var r fasthttp.Response
			r.SetBodyStream(a, len(body))
			if err := c.run(&r); err != nil {
				t.Fatal(err)
			}
			if !a.closed.Load() {
				t.Fatal("the stream was not closed")
			}
			r.Reset() // and again: nothing more is given back
			if p := b.usage(); p != 0 {
				t.Fatalf("pending %d; want 0", p)
			}
		})
	}
}

// budgetConsumer serves pops from a fixed result: Pop answers the first
// min(Batch, len) of res's messages (res itself when it holds no more
// than that), and records the requests and the leases released.
type budgetConsumer struct {
	Consumer // other methods are not called
	res      *pg.PopResult

	mu       sync.Mutex
	reqs     []pg.PopRequest
	released []uuid.UUID
	popped   chan struct{} // one send per Pop, when not nil
	gate     chan struct{} // when not nil, Pop returns once it is closed
}

func (c *budgetConsumer) Pop(_ context.Context, req pg.PopRequest) (*pg.PopResult, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	if c.popped != nil {
		c.popped <- struct{}{}
	}
	if c.gate != nil {
		<-c.gate
	}
	res := *c.res
	res.Messages = res.Messages[:min(req.Batch, len(res.Messages))]
	return &res, nil
}

func (c *budgetConsumer) ReleaseLease(_ context.Context, id uuid.UUID, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = append(c.released, id)
	return nil
}

type noPopMaintenance struct{ MaintenanceControl }

func (noPopMaintenance) PopMaintenance() bool { return false }

// writeCounter is a connection that counts the writes made to it.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countingListener wraps each connection it accepts in a writeCounter.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeCounter{Conn: c, writes: &l.writes}, nil
}

// budgetSetup serves cfg with a budgetConsumer answering pops with n
// messages of payload bytes each (leased, one lease; autoAck requests get
// the same messages).
type budgetBundle struct {
	s    *Server
	c    *budgetConsumer
	addr string
	ln   *countingListener
}

func budgetSetup(t *testing.T, cfg Config, n, payload int) *budgetBundle {
	t.Helper()
	_, res := popAnswer(n, payload)
	c := &budgetConsumer{res: res}
	d := fullDeps()
	d.Consumer, d.Maintenance = c, noPopMaintenance{}
	s, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.srv.ShutdownWithContext(ctx)
	})
	return &budgetBundle{s: s, c: c, addr: inner.Addr().String(), ln: ln}
}

// waitBudget waits until the budget's pending bytes satisfy ok, 10 s at
// most.
func waitBudget(t *testing.T, s *Server, what string, ok func(pending int64) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := s.PendingAnswerBytes()
		if ok(p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: pending %d after 10 s", what, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func zeroBudget(p int64) bool { return p == 0 }

// dialUnread dials addr with a small receive buffer, so that an answer
// the client never reads fills the sockets' buffers soon.
func dialUnread(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPopAnswerGivenBack: a streamed pop answer is counted in the budget
// from when it is built until fasthttp is done with it, and given back
// exactly once whether the client reads it whole, leaves in the middle,
// or never reads (then the stall timeout cuts the connection, long
// before the write timeout).
func TestPopAnswerGivenBack(t *testing.T) {
	t.Parallel()
	// The stall timeout is short where it is what ends the answer (never
	// read), long where a client that reads must not meet it: a race-
	// enabled test run on loaded cores read 13.7 of 26 MB before a 300 ms
	// stall cut it.
	const stall, reading = 300 * time.Millisecond, 20 * time.Second
	for _, c := range []struct {
		name   string
		unread bool // dial with a small receive buffer (dialUnread)
		client func(t *testing.T, conn net.Conn, size int64)
	}{
		{"read whole", false, func(t *testing.T, conn net.Conn, size int64) {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			var a struct{ Messages []json.RawMessage }
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.ContentLength != int64(len(b)) || json.Unmarshal(b, &a) != nil || len(a.Messages) != 400 {
				t.Fatalf("answer: %d bytes of %d, %d messages, %v", len(b), resp.ContentLength, len(a.Messages), err)
			}
		}},
		{"left mid-answer", false, func(t *testing.T, conn net.Conn, size int64) {
			if _, err := io.ReadFull(conn, make([]byte, 100<<10)); err != nil {
				t.Fatal(err)
			}
			conn.Close()
		}},
		{"never read", true, func(t *testing.T, conn net.Conn, size int64) {
			// The stall timeout, not the minute of write timeout, ends it.
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := reading
			if c.unread {
				st = stall
			}
			bb := budgetSetup(t, Config{WriteStallTimeout: st, WriteTimeout: time.Minute}, 400, 64<<10)
			var conn net.Conn
			if c.unread {
				conn = dialUnread(t, bb.addr)
			} else {
				var err error
				if conn, err = net.Dial("tcp", bb.addr); err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}
			if _, err := conn.Write([]byte("GET /api/v1/pop/queue/q?batch=400 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			var size int64
			waitBudget(t, bb.s, "answer counted", func(p int64) bool { size = p; return p > 0 })
			built := time.Now()
			if size < 400*(64<<10) {
				t.Fatalf("%d bytes counted for an answer of 400 messages of 64 KiB", size)
			}
			c.client(t, conn, size)
			waitBudget(t, bb.s, "answer given back", zeroBudget)
			if c.unread {
				if d := time.Since(built); d > 5*time.Second {
					t.Fatalf("an answer never read was dropped %v after it was built; want about the stall timeout, %v", d, stall)
				}
				n, err := io.Copy(io.Discard, conn)
				if n >= size {
					t.Fatalf("read %d bytes of an answer of %d after the stall timeout (%v)", n, size, err)
				}
			}
			// Given back once: nothing goes negative later.
			time.Sleep(50 * time.Millisecond)
			if p := bb.s.PendingAnswerBytes(); p != 0 {
				t.Fatalf("pending %d", p)
			}
		})
	}
}

// TestSmallPopAnswerOneWrite: pop answers leave in as few writes to the
// connection as before the budget: one when the answer fits the
// connection's write buffer (responseBufferBytes, 32 KiB), two up to
// streamAnswerBytes (the buffer's worth, then the rest: fasthttp's single
// writev is not used on the broker's wrapped connections, headConn), and
// a streamed answer no more than that while the client reads (the chunks
// go out as one write while the socket takes them).
func TestSmallPopAnswerOneWrite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n, payload int
		writes     int64
	}{
		{1, 64, 1},
		{40, 256, 1},  // about 24 kB
		{100, 256, 2}, // about 60 kB: the benchmarks' consumers
		{300, 256, 2}, // about 180 kB: streamed
	} {
		t.Run(fmt.Sprintf("%dx%d", c.n, c.payload), func(t *testing.T) {
			t.Parallel()
			bb := budgetSetup(t, Config{}, c.n, c.payload)
			conn, err := net.Dial("tcp", bb.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			for round := range 2 { // and again on the kept-alive connection
				before := bb.ln.writes.Load()
				if _, err := fmt.Fprintf(conn, "GET /api/v1/pop/queue/q?batch=%d HTTP/1.1\r\nHost: x\r\n\r\n", c.n); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(resp.Body)
				var a struct{ Messages []json.RawMessage }
				if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &a) != nil || len(a.Messages) != c.n ||
					resp.ContentLength != int64(len(b)) {
					t.Fatalf("round %d: %d, %d bytes of %d, %d messages, %v", round, resp.StatusCode, len(b), resp.ContentLength, len(a.Messages), err)
				}
				if writes := bb.ln.writes.Load() - before; writes != c.writes {
					t.Fatalf("round %d: an answer of %d bytes took %d writes; want %d", round, len(b), writes, c.writes)
				}
			}
			waitBudget(t, bb.s, "nothing left counted", zeroBudget)
		})
	}
}

// TestPopRefitsAnswerOverBudget: while answers not yet written hold the
// budget, a leased pop whose answer does not fit gives its lease back and
// pops again for what fits (at least one message); an autoAck pop's
// answer is delivered whole; and a pop that finds the budget held by such
// answers alone asks for one message.
func TestPopRefitsAnswerOverBudget(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, bb *budgetBundle, query string) int {
		t.Helper()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + bb.addr + "/api/v1/pop/queue/q?" + query)
		if err := fasthttp.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("pop %s: %d %v", query, resp.StatusCode(), err)
		}
		var a struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(resp.Body(), &a); err != nil {
			t.Fatal(err)
		}
		return len(a.Messages)
	}
	const limit = 4 << 20
	t.Run("leased", func(t *testing.T) {
		t.Parallel()
		bb := budgetSetup(t, Config{MaxPendingAnswerBytes: limit, MaxPopBytes: limit}, 100, 64<<10)
		bb.s.answers.add(limit - 1<<20) // answers not yet written: 1 MiB left
		n := get(t, bb, "batch=100")
		if n < 10 || n > 16 {
			t.Fatalf("a leased pop with 1 MiB left of the budget answered %d messages of 64 KiB; want about 15", n)
		}
		bb.c.mu.Lock()
		reqs, released := bb.c.reqs, bb.c.released
		bb.c.mu.Unlock()
		if len(reqs) != 2 || len(released) != 1 || released[0] != bb.c.res.LeaseID || reqs[1].Batch != n {
			t.Fatalf("pops %+v, leases released %v; want a pop of 100, its lease released, a pop of %d", reqs, released, n)
		}
		bb.s.answers.release(limit - 1<<20)
		waitBudget(t, bb.s, "all given back", zeroBudget)
	})
	t.Run("autoAck", func(t *testing.T) {
		t.Parallel()
		bb := budgetSetup(t, Config{MaxPendingAnswerBytes: limit, MaxPopBytes: limit}, 100, 64<<10)
		bb.s.answers.add(limit - 1<<20)
		if n := get(t, bb, "batch=100&autoAck=true"); n != 100 {
			t.Fatalf("an autoAck pop answered %d messages; want all 100 (they are consumed)", n)
		}
		bb.c.mu.Lock()
		defer bb.c.mu.Unlock()
		if len(bb.c.reqs) != 1 || len(bb.c.released) != 0 {
			t.Fatalf("pops %+v, leases released %v; want one pop, none released", bb.c.reqs, bb.c.released)
		}
	})
	t.Run("budget held by answers", func(t *testing.T) {
		t.Parallel()
		bb := budgetSetup(t, Config{MaxPendingAnswerBytes: limit, MaxPopBytes: limit}, 100, 64<<10)
		bb.s.answers.add(limit)
		if n := get(t, bb, "batch=100"); n != 1 {
			t.Fatalf("a pop with the budget spent answered %d messages; want 1", n)
		}
		bb.c.mu.Lock()
		defer bb.c.mu.Unlock()
		if len(bb.c.reqs) != 1 || bb.c.reqs[0].Batch != 1 || len(bb.c.released) != 0 || bb.s.OneMessagePops() != 1 {
			t.Fatalf("pops %+v, leases released %v, one-message pops %d; want one pop of 1", bb.c.reqs, bb.c.released, bb.s.OneMessagePops())
		}
	})
}

// TestConcurrentPopsOneBound: pops in progress together, more than the
// budget holds of QUEEN_MAX_POP_BYTES, all get that bound while no answer
// is pending (pg combines only concurrent pops of one bound: counting the
// bounds of pops in progress gave the fifth and later 64 KiB, and halved
// the rate of ten consumers).
func TestConcurrentPopsOneBound(t *testing.T) {
	t.Parallel()
	const pops = 10
	bb := budgetSetup(t, Config{}, 100, 256)
	bb.c.gate = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, pops)
	for range pops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, err := fasthttp.GetTimeout(nil, "http://"+bb.addr+"/api/v1/pop/queue/q?batch=100&autoAck=true", 10*time.Second)
			if err == nil && code != fasthttp.StatusOK {
				err = fmt.Errorf("pop: %d", code)
			}
			errs <- err
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		bb.c.mu.Lock()
		n := len(bb.c.reqs)
		bb.c.mu.Unlock()
		if n == pops {
			break
		}
		if time.Now().After(deadline) {
			close(bb.c.gate)
			t.Fatalf("%d of %d pops in progress after 10 s", n, pops)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(bb.c.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	bb.c.mu.Lock()
	defer bb.c.mu.Unlock()
	for i, r := range bb.c.reqs {
		if r.MaxBytes != pg.DefaultMaxPopBytes || r.Batch != 100 {
			t.Fatalf("pop %d of %d in progress together: bound %d, batch %d; want %d, 100", i, pops, r.MaxBytes, r.Batch, pg.DefaultMaxPopBytes)
		}
	}
}
