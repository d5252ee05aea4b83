// Package fastapi is the broker's HTTP surface on fasthttp: routing, JSON in
// and out (goccy/go-json), the push route with its body limit, configure,
// health and the maintenance routes. Every error is JSON {"error": "..."}
// with the right status; a client's mistake is never a 500.
package fastapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/fasthttp/router"
	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/console"
	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/ratelog"
	"github.com/queenmq/queen-go/pg"
	"github.com/queenmq/queen-go/projector"
	"github.com/queenmq/queen-go/wal"
)

// Defaults for Config.
const (
	// DefaultMaxBodyBytes is QUEEN_MAX_BODY_BYTES' default: 64 MiB.
	DefaultMaxBodyBytes = 64 << 20
	// DefaultMaxHeaderBytes is QUEEN_MAX_HEADER_BYTES' default: 32 KiB for
	// the request head (request line and header fields), room for a 16 KiB
	// cookie or JWT beside a long URL and proxies' forwarding headers.
	DefaultMaxHeaderBytes = 32 << 10
	// MinMaxHeaderBytes is the least QUEEN_MAX_HEADER_BYTES accepted.
	MinMaxHeaderBytes = 4 << 10
	// MaxMaxHeaderBytes is the most QUEEN_MAX_HEADER_BYTES accepted: the
	// head buffer is allocated per connection.
	MaxMaxHeaderBytes = 1 << 20
	// DefaultReadTimeout (QUEEN_READ_TIMEOUT_MS' default) bounds reading one
	// request, head and body, from its first byte: a request not received
	// in time is answered 408. It must let the largest body arrive at the
	// slowest link served (64 MiB in 30 s is 2.2 MB/s).
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes idle keep-alive connections.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultWriteTimeout (QUEEN_WRITE_TIMEOUT_MS' default) bounds writing
	// one answer, from the handler's return: a client that stops reading
	// is disconnected then, and the answer's memory freed (without it,
	// four clients that never read a 315 MB answer held 730 MB of the
	// broker's memory for as long as they stayed connected). A long-poll's
	// wait is the handler's, not counted. A pop answer over 64 KiB is cut
	// sooner when its client takes nothing of it for WriteStallTimeout
	// (answerbudget.go).
	DefaultWriteTimeout = 60 * time.Second
	// DefaultMaxConns (QUEEN_MAX_CONNS' default) bounds concurrent
	// connections: each holds a head buffer (QUEEN_MAX_HEADER_BYTES) and a
	// write buffer, so 8,000 connections stalled in their heads took 300 MB;
	// fasthttp's own bound is 262,144.
	DefaultMaxConns = 10000
	// drainLimitFactor × MaxBodyBytes is the most the server reads and
	// discards after a 413 so the client can read the reply.
	drainLimitFactor = 2
)

// Deps are the server's dependencies, one field per capability, each a
// small interface declared beside the handlers that use it. Every field is
// required: New refuses a Deps with a nil field (ErrMissingDependency,
// naming it), so a route never vanishes or fails at request time because
// a dependency is absent. internal/broker wires them.
type Deps struct {
	// Pusher serves POST /api/v1/push (the WAL pipeline).
	Pusher Pusher
	// Configurer serves POST /api/v1/configure (fastapi/configure.go).
	Configurer Configurer
	// Health serves GET /health.
	Health HealthChecker
	// Maintenance serves /api/v1/system/maintenance and
	// /api/v1/system/maintenance/pop, and the pop routes' check of pop
	// maintenance mode.
	Maintenance MaintenanceControl
	// Consumer serves pop, ack and lease extension (fastapi/consume.go)
	// and wakes waiting pops after resource changes (seek, group delete).
	Consumer Consumer
	// FilteredPop serves GET /api/v1/pop by namespace/task
	// (fastapi/status.go).
	FilteredPop FilteredPopper
	// Transactor serves POST /api/v1/transaction (fastapi/transaction.go).
	Transactor Transactor
	// Resources serves the queue, consumer-group and DLQ routes
	// (fastapi/resources.go).
	Resources Resources
	// Admin serves the admin summary routes (fastapi/admin.go).
	Admin Admin
	// Messages serves GET /api/v1/messages and one message's detail
	// (fastapi/messages.go).
	Messages MessageReader
	// Traces serves the message-trace routes (fastapi/traces.go).
	Traces Tracer
	// Status serves the status and analytics routes (fastapi/status.go).
	Status StatusReader
	// Runtime reports the live broker's WAL backlog and process figures to
	// the status routes (fastapi/status.go).
	Runtime StatusSource
	// Streams serves /streams/v1/* (fastapi/streams.go).
	Streams Streams
	// MessageDeleter serves DELETE
	// /api/v1/messages/:partitionId/:transactionId (fastapi/streams.go).
	MessageDeleter MessageDeleter
	// Pipeline serves GET /api/v1/system/pipeline (fastapi/pipeline.go).
	Pipeline PipelineReporter
}

// ErrMissingDependency is returned by New when a Deps field is nil (or a
// nil pointer); the error names the fields.
var ErrMissingDependency = errors.New("fastapi: missing dependency")

// missing names the nil fields of d ("Deps.Admin"), in declaration order.
// A field holding a nil pointer, map, func or channel counts as nil: its
// methods would fail at request time.
func (d Deps) missing() []string {
	var out []string
	v := reflect.ValueOf(d)
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.IsNil() {
			out = append(out, "Deps."+v.Type().Field(i).Name)
			continue
		}
		switch e := f.Elem(); e.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
			if e.IsNil() {
				out = append(out, "Deps."+v.Type().Field(i).Name)
			}
		}
	}
	return out
}

// Pusher runs POST /api/v1/push.
type Pusher interface {
	// Push runs a push body through the pipeline (see ingest.Pipeline.Push).
	// It reads body until it returns (the WAL writer copies the payloads
	// from it), and nothing it returns may alias body: the handler reuses
	// the body's buffer for a later request once Push has returned.
	Push(ctx context.Context, body []byte, producerSub *string) ([]ingest.Result, error)
	// Drain answers every push waiting for a verdict buffered, and every
	// later one as soon as its record is durable (ingest.Registry.Drain).
	// The server calls it when it starts to shut down: the handler's
	// context passed to Push does not end then (it is the request's
	// context without its cancellation), so that a push waits on its own
	// channel alone.
	Drain()
}

// HealthChecker answers GET /health.
type HealthChecker interface {
	// Health returns nil when the broker can serve: the projector runs and
	// a real database round-trip succeeded; else the projector's stop
	// error (projector.ErrWALDiverged, wal.ErrCorruptRecord, ...) or the
	// database's.
	Health(ctx context.Context) error
}

// MaintenanceControl holds push and pop maintenance mode for the
// maintenance routes and the pop routes.
type MaintenanceControl interface {
	// SetMaintenance turns push maintenance mode on or off.
	SetMaintenance(ctx context.Context, enabled bool) error
	// MaintenanceStatus reports the mode and the WAL backlog.
	MaintenanceStatus() MaintenanceStatus
	// PopMaintenance reports pop maintenance mode (pops answer 204).
	PopMaintenance() bool
	// SetPopMaintenance turns pop maintenance mode on or off.
	SetPopMaintenance(ctx context.Context, on bool) error
}

// MaintenanceStatus is the body of GET /api/v1/system/maintenance.
type MaintenanceStatus struct {
	MaintenanceMode bool   `json:"maintenanceMode"`
	BufferedEntries uint64 `json:"bufferedMessages"` // WAL records not yet in PostgreSQL
	BufferHealthy   bool   `json:"bufferHealthy"`    // the WAL accepts writes
	DBHealthy       bool   `json:"dbHealthy"`
	Checkpoint      uint64 `json:"checkpoint"` // last WAL index committed to PostgreSQL
	DurableIndex    uint64 `json:"walIndex"`   // last WAL index fsynced
}

// Config of the HTTP server. Zero fields take the defaults above.
type Config struct {
	// MaxBodyBytes is the largest request body in bytes (QUEEN_MAX_BODY_BYTES).
	MaxBodyBytes int
	// BodyMemoryBytes bounds the bytes of request bodies held at once, all
	// connections together, beyond each body's first 64 KiB
	// (QUEEN_BODY_MEMORY_BYTES; bodyBudget). A body that would pass it is
	// answered 503 with Retry-After: 1. 0: four times MaxBodyBytes; a value
	// below MaxBodyBytes is raised to it, so that one body of the largest
	// size is always received when no other is.
	BodyMemoryBytes int64
	// MaxHeaderBytes is the largest request head, request line and header
	// fields together, in bytes (QUEEN_MAX_HEADER_BYTES; default
	// DefaultMaxHeaderBytes). Over it: 414 when the request line alone does
	// not fit, else 431. One buffer of this size is held per connection.
	// Values outside [MinMaxHeaderBytes, MaxMaxHeaderBytes] are clamped
	// (cmd/queen refuses them).
	MaxHeaderBytes int
	// ReadTimeout bounds reading one request, head and body
	// (QUEEN_READ_TIMEOUT_MS; default DefaultReadTimeout); over it: 408.
	ReadTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one answer (QUEEN_WRITE_TIMEOUT_MS;
	// default DefaultWriteTimeout); past it the connection is closed.
	WriteTimeout time.Duration
	// WriteStallTimeout bounds how long a streamed pop answer (over 64
	// KiB) may wait for the client to take the next 256 KiB of it
	// (QUEEN_WRITE_STALL_TIMEOUT_MS; default DefaultWriteStallTimeout);
	// past it the connection is closed. See answerbudget.go.
	WriteStallTimeout time.Duration
	// MaxPopBytes is the store's bound on one pop's messages, in stored
	// bytes (QUEEN_MAX_POP_BYTES; default pg.DefaultMaxPopBytes): what a
	// pop may take of the answer budget.
	MaxPopBytes int64
	// MaxPendingAnswerBytes is the answer budget: the bytes of pop
	// answers over 64 KiB built and not yet written
	// (QUEEN_MAX_PENDING_ANSWER_BYTES; default
	// DefaultPendingAnswerPops × MaxPopBytes). See answerbudget.go.
	MaxPendingAnswerBytes int64
	// MaxConns bounds concurrent connections (QUEEN_MAX_CONNS; 0 here:
	// DefaultMaxConns; negative: fasthttp's default bound, 262,144); over
	// it a new connection is answered 503 (JSON, Retry-After: 1) and
	// closed (headListener).
	MaxConns int
	// DBTimeout bounds the PostgreSQL work of a pop without wait, each
	// attempt of a waiting pop, acks, lease extension, configure,
	// transactions and the maintenance flags (QUEEN_DB_TIMEOUT_MS; default
	// DefaultDBTimeout, 5 s). Past it they answer 503; a pop's COMMIT
	// already sent is waited for beyond it (30 s at most).
	DBTimeout time.Duration
	// AdminDBTimeout bounds the PostgreSQL work of the resource, admin,
	// message and trace routes (QUEEN_ADMIN_DB_TIMEOUT_MS; default
	// DefaultAdminDBTimeout, 30 s). Past it they answer 503.
	AdminDBTimeout time.Duration
	// MaxListingRequests is how many GET requests of the listing routes
	// (status, analytics, resources, consumer groups, DLQ, messages,
	// traces) may run at once; more wait for a turn (listingGate). The
	// broker sets a quarter of its PostgreSQL pool (DB_POOL_SIZE / 4, at
	// least 1), so that reads, however heavy, always leave the projector,
	// pops and acks most of the pool. 0: DefaultMaxListingRequests.
	MaxListingRequests int
	// MaxPushPartitions is the most distinct partitions the pushes of one
	// /api/v1/transaction may name (QUEEN_MAX_PUSH_PARTITIONS, as for a
	// push; ingest.CheckPartitions); 0 is no limit. The broker sets its
	// push limit.
	MaxPushPartitions int
	// Pprof serves Go's profiles under /debug/pprof/ (QUEEN_PPROF=true).
	Pprof bool
	// Auth, when set, wraps every route (JWT, role policy); nil = no auth.
	Auth *auth.Verifier
	// Metrics, when set, serves Prometheus text on GET /metrics and
	// /metrics/prometheus.
	Metrics fasthttp.RequestHandler
	// Console, when set, serves the web console's files in front of
	// authentication (console.Handler.Wrap says which requests it takes).
	Console *console.Handler
	Logger  *slog.Logger
}

// responseBufferBytes is each connection's response write buffer.
const responseBufferBytes = 32 << 10

// Server is the HTTP server.
type Server struct {
	cfg  Config
	deps Deps
	srv  *fasthttp.Server
	log  *slog.Logger
	// failLog logs failures that repeat on every request (a WAL that
	// cannot be written) once per interval with a count.
	failLog *ratelog.Logger
	// unavailable logs the requests that could not reach PostgreSQL, once
	// per outage at warn.
	unavailable *unavailableLog
	// wakes keeps the waiting pops of one queue and group from all
	// claiming on every wake-up (wakeGate).
	wakes wakeGate
	// listingTurns is the listing gate's semaphore, listingWait how long a
	// request waits for a turn (listingGate).
	listingTurns chan struct{}
	listingWait  time.Duration
	// heavyWriteTurns is heavyWriteGate's semaphore (waits as long).
	heavyWriteTurns chan struct{}
	// bodies bounds the request body bytes held at once (readStream).
	bodies *bodyBudget
	// answers is the budget of pop answers in memory (answerbudget.go).
	answers *answerBudget
}

// New builds the server and its routes from cfg (zero fields take the
// defaults) and deps; every Deps field is required, else New returns
// ErrMissingDependency naming the missing ones.
func New(cfg Config, deps Deps) (*Server, error) {
	if m := deps.missing(); len(m) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrMissingDependency, strings.Join(m, ", "))
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.BodyMemoryBytes <= 0 {
		cfg.BodyMemoryBytes = 4 * int64(cfg.MaxBodyBytes)
	}
	cfg.BodyMemoryBytes = max(cfg.BodyMemoryBytes, int64(cfg.MaxBodyBytes))
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	cfg.MaxHeaderBytes = min(max(cfg.MaxHeaderBytes, MinMaxHeaderBytes), MaxMaxHeaderBytes)
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.WriteStallTimeout <= 0 {
		cfg.WriteStallTimeout = DefaultWriteStallTimeout
	}
	if cfg.MaxPopBytes <= 0 {
		cfg.MaxPopBytes = pg.DefaultMaxPopBytes
	}
	if cfg.MaxPendingAnswerBytes <= 0 {
		cfg.MaxPendingAnswerBytes = DefaultPendingAnswerPops * cfg.MaxPopBytes
	}
	switch {
	case cfg.MaxConns == 0:
		cfg.MaxConns = DefaultMaxConns
	case cfg.MaxConns < 0:
		cfg.MaxConns = fasthttp.DefaultConcurrency
	}
	if cfg.DBTimeout <= 0 {
		cfg.DBTimeout = DefaultDBTimeout
	}
	if cfg.AdminDBTimeout <= 0 {
		cfg.AdminDBTimeout = DefaultAdminDBTimeout
	}
	if cfg.MaxListingRequests <= 0 {
		cfg.MaxListingRequests = DefaultMaxListingRequests
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, log: cfg.Logger, failLog: ratelog.New(cfg.Logger, ratelog.DefaultInterval),
		unavailable:  &unavailableLog{log: cfg.Logger, now: time.Now},
		listingTurns: make(chan struct{}, cfg.MaxListingRequests), listingWait: defaultListingWait,
		heavyWriteTurns: make(chan struct{}, cfg.MaxListingRequests),
		bodies:          newBodyBudget(cfg.BodyMemoryBytes),
		answers:         newAnswerBudget(cfg.MaxPendingAnswerBytes, cfg.MaxPopBytes)}
	// The router matches the raw path, so a queue named "a/b" arrives as
	// one segment a%2Fb and is decoded by the handler (pathName).
	r := router.New()
	r.POST("/api/v1/push", s.push)
	r.POST("/api/v1/configure", s.configure)
	r.GET("/health", s.health)
	r.GET("/api/v1/system/maintenance", s.getMaintenance)
	r.POST("/api/v1/system/maintenance", s.postMaintenance)
	r.GET("/api/v1/system/maintenance/pop", s.getPopMaintenance)
	r.POST("/api/v1/system/maintenance/pop", s.postPopMaintenance)
	r.GET("/api/v1/pop/queue/{queue}", s.pop)
	r.GET("/api/v1/pop/queue/{queue}/partition/{partition}", s.pop)
	r.POST("/api/v1/ack", s.ack)
	r.POST(ackBatchPath, s.ackBatch)
	r.POST("/api/v1/transaction", s.largeWriteGate(s.transaction))
	// The listing routes' GETs take a turn of the listing gate; their
	// writes (configure, delete, seek) and everything else do not.
	lr := listingRoutes{r, s}
	s.routeResources(lr)
	s.routeTraces(lr)
	s.routeAdmin(lr)
	s.routeMessages(lr)
	s.routeStatus(r, lr)
	s.routePipeline(r)
	r.POST("/api/v1/lease/{leaseId}/extend", s.extendLease)
	s.routeStreams(r) // streams and single-message delete: fastapi/streams.go
	if cfg.Metrics != nil {
		r.GET("/metrics", cfg.Metrics)
		r.GET("/metrics/prometheus", cfg.Metrics)
	}
	if cfg.Pprof {
		r.GET("/debug/pprof/{profile:*}", pprofhandler.PprofHandler)
	}
	// OPTIONS answers 204 with the CORS headers on every path, a route or
	// not (a browser's preflight; Queen answers OPTIONS /* alike): the
	// router calls GlobalOPTIONS for a path some route serves, NotFound for
	// any other.
	preflight := func(ctx *fasthttp.RequestCtx) { cors(ctx); ctx.SetStatusCode(fasthttp.StatusNoContent) }
	r.GlobalOPTIONS = preflight
	// An unknown route answers 404 {"error","code":"no_such_route"}: Queen's
	// SDKs read "code" to tell a route this broker lacks (and fall back)
	// from a resource that does not exist.
	r.NotFound = func(ctx *fasthttp.RequestCtx) {
		if ctx.IsOptions() {
			preflight(ctx)
			return
		}
		writeJSON(ctx, fasthttp.StatusNotFound, map[string]string{"error": "not found", "code": "no_such_route"})
	}
	r.MethodNotAllowed = func(ctx *fasthttp.RequestCtx) {
		writeErr(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
	}
	r.PanicHandler = func(ctx *fasthttp.RequestCtx, v any) {
		s.log.Error("http: handler panic", "path", string(ctx.Path()), "panic", v)
		writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
	}
	handler := requireIdentity(r.Handler)
	if cfg.Auth != nil {
		handler = cfg.Auth.Middleware(handler)
	}
	handler = serveHead(handler)
	handler = cfg.Console.Wrap(handler)
	handler = s.bodies.release(handler)
	s.srv = &fasthttp.Server{
		Handler:           handler,
		Name:              "queen-go",
		StreamRequestBody: true, // the body limit is enforced in readBody, with a readable 413
		// With streaming, this is only how much fasthttp reads ahead.
		MaxRequestBodySize: cfg.MaxBodyBytes + 1,
		ReadTimeout:        cfg.ReadTimeout,
		IdleTimeout:        cfg.IdleTimeout,
		WriteTimeout:       cfg.WriteTimeout,
		// headListener refuses connections over MaxConns itself.
		Concurrency:                   cfg.MaxConns + connLimitSlack,
		NoDefaultServerHeader:         true,
		DisableHeaderNamesNormalizing: false,
		// The head buffer is the head limit (headlimit.go).
		ReadBufferSize: cfg.MaxHeaderBytes,
		// A connection's write buffer holds a whole 100-item push answer
		// (about 17 KB with its head), so that it leaves in one write
		// syscall: with fasthttp's 4 KiB default, bufio sends the head and
		// the body's first 4 KiB, then the rest, in two or more.
		WriteBufferSize: responseBufferBytes,
		ErrorHandler:    s.errorHandler,
		ExpectHandler:   s.expect,
		// fasthttp's errors quote the request head (credentials included)
		// unless told not to; its log lines go through slog, redacted.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{ratelog.New(cfg.Logger, ratelog.DefaultInterval)},
	}
	return s, nil
}

// armWrite gives the connection's next write Config.WriteTimeout from
// now. fasthttp arms its WriteTimeout once a handler has returned, and
// leaves that deadline on the connection: a write it makes on a kept-alive
// connection before any handler returns (the 100 Continue of a request
// with Expect: 100-continue, an early refusal, the answer to a request it
// could not read) after more than WriteTimeout of idleness would meet the
// last answer's expired deadline and drop the connection. expect and
// errorHandler arm the connection itself: RequestCtx.SetWriteDeadline
// would also stop fasthttp from arming the answer's write after the
// handler.
func (s *Server) armWrite(ctx *fasthttp.RequestCtx) {
	_ = ctx.Conn().SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
}

// PendingAnswerBytes reports the answer budget's use: the bytes of pop
// answers over 64 KiB built and not yet written
// (Config.MaxPendingAnswerBytes bounds them).
func (s *Server) PendingAnswerBytes() int64 { return s.answers.usage() }

// OneMessagePops counts the pops the answer budget held to one message
// (answers not yet written held it).
func (s *Server) OneMessagePops() uint64 { return s.answers.ones.Load() }

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(&headListener{Listener: ln, window: s.cfg.MaxHeaderBytes, limit: int64(s.cfg.MaxConns)})
}

// Shutdown stops accepting, answers waiting pushes buffered once their
// records are durable (Pusher.Drain), and waits for in-flight requests
// (until ctx ends).
func (s *Server) Shutdown(ctx context.Context) error {
	s.deps.Pusher.Drain()
	return s.srv.ShutdownWithContext(ctx)
}

// The CORS headers every answer carries, in canonical form (set without
// fasthttp's per-call normalisation).
var (
	corsOriginKey    = []byte("Access-Control-Allow-Origin")
	corsOriginValue  = []byte("*")
	corsMethodsKey   = []byte("Access-Control-Allow-Methods")
	corsMethodsValue = []byte("GET, POST, PUT, DELETE, OPTIONS")
	corsHeadersKey   = []byte("Access-Control-Allow-Headers")
	corsHeadersValue = []byte("Content-Type, Authorization")
)

func cors(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.SetCanonical(corsOriginKey, corsOriginValue)
	h.SetCanonical(corsMethodsKey, corsMethodsValue)
	h.SetCanonical(corsHeadersKey, corsHeadersValue)
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = fasthttp.StatusInternalServerError, []byte(`{"error":"encoding response"}`)
	}
	writeJSONBytes(ctx, status, b)
}

// writeJSONBytes answers status with b, a JSON document built by the
// caller, and the CORS headers; b is copied.
func writeJSONBytes(ctx *fasthttp.RequestCtx, status int, b []byte) {
	cors(ctx)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}

func writeErr(ctx *fasthttp.RequestCtx, status int, msg string) {
	writeJSON(ctx, status, map[string]string{"error": msg})
}

// readBodyOrAnswer is readBody for handlers: on failure it has answered
// 413 (over QUEEN_MAX_BODY_BYTES, or the route's own lower limit), 408 (the body did not arrive within
// QUEEN_READ_TIMEOUT_MS, e.g. a Content-Length longer than what is sent),
// 503 with Retry-After: 1 (the body budget, QUEEN_BODY_MEMORY_BYTES, is
// spent by other requests' bodies: not the client's mistake, and nothing
// was done) or 400, and returns false.
func (s *Server) readBodyOrAnswer(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	return s.readBodyOrAnswerInto(ctx, nil)
}

// bodyLimit is the body limit of the route at path and the name a 413
// gives it: QUEEN_MAX_BODY_BYTES, except for ack/batch and POST
// /api/v1/traces, whose own MaxAckBatchBytes and MaxTraceBodyBytes apply
// when lower. Both the read (readBodyOrAnswerInto) and the Expect:
// 100-continue check (expect) ask it.
func (s *Server) bodyLimit(path []byte) (int, string) {
	switch string(path) {
	case ackBatchPath:
		if MaxAckBatchBytes < s.cfg.MaxBodyBytes {
			return MaxAckBatchBytes, "the ack/batch limit of 8 MiB"
		}
	case tracesPath:
		if MaxTraceBodyBytes < s.cfg.MaxBodyBytes {
			return MaxTraceBodyBytes, "the traces limit of 1 MiB"
		}
	}
	return s.cfg.MaxBodyBytes, "QUEEN_MAX_BODY_BYTES"
}

// readBodyOrAnswerInto is readBodyOrAnswer reading into buf's memory when
// it is large enough (the push handler's pooled buffers), up to the route's
// limit (bodyLimit).
func (s *Server) readBodyOrAnswerInto(ctx *fasthttp.RequestCtx, buf []byte) ([]byte, bool) {
	limit, limitName := s.bodyLimit(ctx.Path())
	body, err := s.readBody(ctx, buf, limit)
	if err == nil {
		// Before the error tests: isTimeout's errors.As target escapes, an
		// allocation per request even for a nil error.
		return body, true
	}
	if errors.Is(err, errTooLarge) {
		writeErr(ctx, fasthttp.StatusRequestEntityTooLarge, "request body exceeds "+limitName)
		return nil, false
	}
	if errors.Is(err, errBodyBudget) {
		s.drain(ctx)
		ctx.Response.Header.Set("Retry-After", "1")
		writeErr(ctx, fasthttp.StatusServiceUnavailable, "the broker holds QUEEN_BODY_MEMORY_BYTES of request bodies already: retry")
		return nil, false
	}
	if isTimeout(err) {
		ctx.SetConnectionClose()
		writeErr(ctx, fasthttp.StatusRequestTimeout, "request body not received within QUEEN_READ_TIMEOUT_MS")
		return nil, false
	}
	writeErr(ctx, fasthttp.StatusBadRequest, "could not read request body")
	return nil, false
}

// errTooLarge is returned by readBody for a body over the limit.
var errTooLarge = errors.New("request body too large")

// readBody reads the request body up to limit bytes. Over the limit it
// drains (bounded) what the client still sends, so the 413 is readable and
// not lost to a connection reset, then marks the connection to close.
// What the body grows past its first 64 KiB is taken from the server's
// body budget as it arrives (readStream); errBodyBudget when spent.
//
// buf, when its capacity suffices, is where the body is read (from its
// start); otherwise a new buffer is made.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, buf []byte, limit int) ([]byte, error) {
	if cl := ctx.Request.Header.ContentLength(); cl > limit {
		s.drain(ctx)
		return nil, errTooLarge
	}
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return ctx.Request.Body(), nil
	}
	buf, err := s.readStream(ctx, stream, buf, limit+1)
	if err != nil {
		return nil, err
	}
	if len(buf) > limit {
		s.drain(ctx)
		return nil, errTooLarge
	}
	return buf, nil
}

// drain reads and discards what the client is still sending of a body
// over the limit, at most drainLimitFactor × MaxBodyBytes, and marks the
// connection to close. A client that stops sending for bodyDrainIdle (it
// declared a huge Content-Length and sent nothing more) gets its 413 then,
// not at the read timeout; one that keeps sending is drained until the
// read timeout (QUEEN_READ_TIMEOUT_MS after the handler was called), so
// that it reaches the point where it reads the answer.
func (s *Server) drain(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return
	}
	end := ctx.Time().Add(s.cfg.ReadTimeout)
	left := int64(drainLimitFactor) * int64(s.cfg.MaxBodyBytes)
	buf := make([]byte, 32<<10)
	for left > 0 {
		d := time.Now().Add(bodyDrainIdle)
		if d.After(end) {
			d = end
		}
		_ = ctx.Conn().SetReadDeadline(d)
		n, err := stream.Read(buf[:min(int64(len(buf)), left)])
		left -= int64(n)
		if err != nil {
			return
		}
	}
}

// bodyDrainIdle is how long drain waits for more of an over-limit body.
const bodyDrainIdle = 2 * time.Second

func (s *Server) push(ctx *fasthttp.RequestCtx) {
	bp, _ := pushBodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	body, ok := s.readBodyOrAnswerInto(ctx, (*bp)[:0])
	if !ok {
		pushBodies.Put(bp)
		return
	}
	// The wait ends at shutdown by Drain (Shutdown), not by ctx.Done():
	// a select on the server's done channel, which every waiting push
	// shares, is what a context that can end would cost.
	res, err := s.deps.Pusher.Push(context.WithoutCancel(ctx), body, producerSub(ctx))
	// Push keeps nothing that aliases body once it returns (Pusher).
	if cap(body) <= keepPushBody && ctx.RequestBodyStream() != nil {
		*bp = body[:0]
	}
	pushBodies.Put(bp)
	if err == nil {
		writePushAnswer(ctx, res)
		return
	}
	var verr *ingest.ValidationError // escapes: checked only on failure
	switch {
	case errors.As(err, &verr):
		writeErr(ctx, fasthttp.StatusBadRequest, verr.Msg)
	case errors.Is(err, ingest.ErrMaintenanceWrite):
		s.failLog.Error("push: WAL write failed in maintenance mode", "err", err)
		writeErr(ctx, fasthttp.StatusInternalServerError, "file buffer write failed")
	case err != nil:
		s.failLog.Error("push failed", "err", err)
		writeErr(ctx, fasthttp.StatusInternalServerError, "internal error")
	}
}

// producerSub is the validated token's sub, or nil without auth (or with
// a token that has no sub): docs/push.md, "Request" (producerSub is never
// read from the body).
func producerSub(ctx *fasthttp.RequestCtx) *string {
	p := auth.PrincipalFrom(ctx)
	if p == nil || p.Sub == "" {
		return nil
	}
	sub := p.Sub
	return &sub
}

func (s *Server) health(ctx *fasthttp.RequestCtx) {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.deps.Health.Health(c); err != nil {
		if errors.Is(err, projector.ErrWALDiverged) {
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]any{
				"status": "unhealthy", "database": "connected", "projector": "stopped: WAL and database disagree", "server": "queen-go"})
			return
		}
		if errors.Is(err, wal.ErrCorruptRecord) || errors.Is(err, wal.ErrUnknownVersion) {
			writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]any{
				"status": "unhealthy", "database": "connected", "projector": "stopped: a WAL record does not verify", "server": "queen-go"})
			return
		}
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]any{
			"status": "unhealthy", "database": "disconnected", "server": "queen-go"})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "healthy", "database": "connected", "server": "queen-go"})
}

func (s *Server) getMaintenance(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, s.deps.Maintenance.MaintenanceStatus())
}

func (s *Server) postMaintenance(ctx *fasthttp.RequestCtx) {
	enabled, ok := s.readEnabled(ctx)
	if !ok {
		return
	}
	c, cancel := s.dbCtx()
	defer cancel()
	if err := s.deps.Maintenance.SetMaintenance(c, enabled); err != nil {
		// The mode is in effect on this broker; only persisting it failed.
		s.log.Warn("maintenance: could not persist the flag", "err", err)
	}
	st := s.deps.Maintenance.MaintenanceStatus()
	msg := "maintenance mode disabled: the projector resumes and drains the WAL"
	if st.MaintenanceMode {
		msg = "maintenance mode enabled: pushes are written to the WAL and answered buffered"
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"maintenanceMode": st.MaintenanceMode,
		"bufferedMessages": st.BufferedEntries, "bufferHealthy": st.BufferHealthy, "message": msg})
}
