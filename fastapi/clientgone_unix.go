//go:build linux || darwin || freebsd || netbsd || openbsd

package fastapi

import (
	"errors"
	"syscall"

	"github.com/valyala/fasthttp"
)

// clientGone reports whether the client of ctx has closed its connection
// (or reset it), by a non-blocking peek at the socket: end of stream or a
// reset means gone; no data yet, or bytes of a next request, mean still
// there. fasthttp tells a handler nothing of a peer that leaves, and a
// long-polling pop must not lease messages to a request nobody reads.
// Connections that are not plain sockets report false (unknown). A client
// that half-closes its side after sending the request (no HTTP client in
// use does) reads as gone too: its long-poll answers 204 at once.
func clientGone(ctx *fasthttp.RequestCtx) bool {
	sc, ok := ctx.Conn().(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var buf [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			gone = true
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			gone = true
		}
		return true // never wait for readability
	})
	return gone
}
