package fastapi

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

// popPrefix starts the pop routes, the GET routes that are not safe;
// filteredPop is the filtered pop's path (GET /api/v1/pop?namespace&task).
var popPrefix, filteredPop = []byte("/api/v1/pop/"), []byte("/api/v1/pop")

// isPop reports whether path is a pop route's.
func isPop(path []byte) bool {
	return bytes.HasPrefix(path, popPrefix) || bytes.Equal(bytes.TrimSuffix(path, []byte("/")), filteredPop)
}

// serveHead answers HEAD on every GET route as GET would, with the same
// status and headers (Content-Length included) and no body (RFC 9110
// §9.3.2): health checks and load balancers probe with HEAD. It wraps the
// whole handler, auth included, so HEAD needs what GET needs. The pop
// routes are the exception: a pop leases messages, which a request whose
// answer is thrown away must not do, so HEAD there answers 405 with
// "Allow: GET". Any other method passes through unchanged.
func serveHead(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsHead() {
			next(ctx)
			return
		}
		if isPop(ctx.Path()) || isPop(ctx.Request.URI().PathOriginal()) {
			ctx.Response.Header.Set(fasthttp.HeaderAllow, fasthttp.MethodGet)
			writeErr(ctx, fasthttp.StatusMethodNotAllowed, "HEAD is not served on pop routes: a pop leases messages")
			return
		}
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		next(ctx)
		// fasthttp drops the body of a HEAD request's answer (and keeps its
		// Content-Length) when it sees the method again.
		ctx.Request.Header.SetMethod(fasthttp.MethodHead)
	}
}
