package fastapi

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// How a request head over Config.MaxHeaderBytes is answered.
//
// fasthttp reads a head into one buffer of Server.ReadBufferSize bytes
// (set to MaxHeaderBytes) and gives up with *fasthttp.ErrSmallBuffer when
// it fills without the blank line that ends the head. That error is the
// same whether the request line alone did not fit (an over-long URL: 414)
// or the header fields did not (431), and fasthttp has reset the parsed
// head by then. So each connection is a headConn, which remembers how many
// bytes it has read since the last LF: the full buffer holds exactly the
// last MaxHeaderBytes bytes read, so it holds no LF (the request line is
// not complete) exactly when that count reaches MaxHeaderBytes.
//
// The client has usually sent its whole head, and maybe a body, when it is
// refused; closing a socket with unread input makes the kernel send a reset
// that can destroy the answer before the client reads it. So before the
// 414/431 is written, drainUnread reads and discards what is still arriving
// (bounded in bytes and time).
const (
	// drainIdle is how long the drain waits for more input before it
	// decides the client has sent everything.
	drainIdle = 100 * time.Millisecond
	// drainMaxTime bounds the whole drain.
	drainMaxTime = 2 * time.Second
	// drainMaxBytes bounds what the drain reads.
	drainMaxBytes = 4 << 20
	// nlScanChunk is the chunk lastLF scans with bytes.IndexByte (fast)
	// before it looks for the last LF byte by byte within the chunk.
	nlScanChunk = 512
)

// headListener wraps every accepted connection in a headConn, and
// refuses a connection over limit itself (refuseConn), with a JSON 503,
// where fasthttp's own Concurrency bound answered plain text.
type headListener struct {
	net.Listener
	window int          // the read buffer size (MaxHeaderBytes)
	limit  int64        // most connections open at once (Config.MaxConns)
	open   atomic.Int64 // connections accepted and not closed
}

func (l *headListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.limit {
			l.open.Add(-1)
			go refuseConn(c)
			continue
		}
		return &headConn{Conn: c, window: l.window, open: &l.open}, nil
	}
}

// connLimitSlack is how far above Config.MaxConns fasthttp's own
// Concurrency bound is set: a served connection leaves headListener's
// count when it is closed, slightly before fasthttp's, so that fasthttp
// never refuses one the listener admitted.
const connLimitSlack = 1024

// overConnLimitAnswer is the whole answer to a connection over
// QUEEN_MAX_CONNS: JSON and CORS as every answer, Retry-After, and the
// connection closed.
var overConnLimitAnswer = func() []byte {
	body := `{"error":"the broker serves QUEEN_MAX_CONNS connections already: retry"}`
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" +
		"Access-Control-Allow-Origin: *\r\nRetry-After: 1\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// refuseConn answers a connection over the limit 503 and closes it. It
// reads what the client sends for a short while first (refuseDrain, at
// most 64 KiB), so that the close does not reset the connection before
// the answer is read; a refused connection costs a goroutine for that
// long at most.
func refuseConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseDrain))
	if _, err := c.Write(overConnLimitAnswer); err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// refuseDrain bounds refuseConn.
const refuseDrain = 250 * time.Millisecond

// headConn is a connection that tracks sinceLF (see the comment above).
// It is read only by the goroutine serving the connection; fasthttp's
// error handler runs on that goroutine too.
type headConn struct {
	net.Conn
	window  int
	sinceLF int           // bytes read since the last LF, at most window
	open    *atomic.Int64 // headListener.open, left on the first Close
	closed  atomic.Bool
}

// Close closes the connection and leaves the listener's count once.
func (c *headConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.open.Add(-1)
	}
	return c.Conn.Close()
}

// Read reads from the connection and updates sinceLF. Only the last window
// bytes of a read can matter, so the scan is bounded by window per read.
func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		tail := p[:n]
		if len(tail) > c.window {
			tail = tail[len(tail)-c.window:]
		}
		if i := lastLF(tail); i >= 0 {
			c.sinceLF = len(tail) - 1 - i
		} else {
			c.sinceLF = min(c.sinceLF+n, c.window)
		}
	}
	return n, err
}

// SyscallConn exposes the socket (clientGone peeks at it).
func (c *headConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("fastapi: connection has no file descriptor")
	}
	return sc.SyscallConn()
}

// requestLineOverflow reports whether the head fasthttp refused with
// ErrSmallBuffer had no complete request line.
func (c *headConn) requestLineOverflow() bool { return c.sinceLF >= c.window }

// lastLF is bytes.LastIndexByte(b, '\n') done with the vectorised
// IndexByte: once over b (a JSON body usually has no LF), then over chunks
// from the end. LastIndexByte goes byte by byte, ~25× slower.
func lastLF(b []byte) int {
	if bytes.IndexByte(b, '\n') < 0 { // one vectorised pass for a read without LF
		return -1
	}
	for end := len(b); end > 0; {
		start := max(0, end-nlScanChunk)
		if bytes.IndexByte(b[start:end], '\n') >= 0 {
			return start + bytes.LastIndexByte(b[start:end], '\n')
		}
		end = start
	}
	return -1
}

// errorHandler is fasthttp's Server.ErrorHandler: what to answer when a
// request cannot be read or parsed (the handler never runs). Every answer
// is JSON and closes the connection:
//
//	431 the head's header fields exceed QUEEN_MAX_HEADER_BYTES
//	414 the request line (the URL) alone exceeds it
//	413 the body exceeds QUEEN_MAX_BODY_BYTES
//	408 the request did not arrive within QUEEN_READ_TIMEOUT_MS
//	400 anything else (malformed)
func (s *Server) errorHandler(ctx *fasthttp.RequestCtx, err error) {
	s.armWrite(ctx) // its answer is written next
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		hc, _ := ctx.Conn().(*headConn)
		lineOverflow := hc != nil && hc.requestLineOverflow() // before the drain reads on
		drainUnread(ctx.Conn())
		if lineOverflow {
			writeErr(ctx, fasthttp.StatusRequestURITooLong, "request line (URL) longer than QUEEN_MAX_HEADER_BYTES")
			return
		}
		writeErr(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers larger than QUEEN_MAX_HEADER_BYTES")
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeErr(ctx, fasthttp.StatusRequestEntityTooLarge, "request body too large")
	case isTimeout(err):
		writeErr(ctx, fasthttp.StatusRequestTimeout, "request not received within QUEEN_READ_TIMEOUT_MS")
	default:
		writeErr(ctx, fasthttp.StatusBadRequest, "malformed HTTP request")
	}
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// drainUnread reads and discards what the client is still sending, until
// it pauses for drainIdle, drainMaxTime passes or drainMaxBytes are read,
// so that the error answer is not lost to a reset (see above). The
// connection is closed by fasthttp afterwards.
func drainUnread(c net.Conn) {
	if c == nil {
		return
	}
	deadline := time.Now().Add(drainMaxTime)
	buf := make([]byte, 32<<10)
	for total := 0; total < drainMaxBytes; {
		d := time.Now().Add(drainIdle)
		if d.After(deadline) {
			d = deadline
		}
		_ = c.SetReadDeadline(d)
		n, err := c.Read(buf)
		total += n
		if err != nil {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
}
