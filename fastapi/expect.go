package fastapi

import "github.com/valyala/fasthttp"

// expect is fasthttp's Server.ExpectHandler, asked before a request with
// "Expect: 100-continue" sends its body (RFC 9110 §10.1.1). It invites the
// body only when the request would be served: with authentication on, the
// token must verify and its roles cover the route (the same decision as the
// auth middleware, auth.Verifier.Authorize: 401/403); a Content-Length
// over the route's limit (bodyLimit: QUEEN_MAX_BODY_BYTES, ack/batch's
// 8 MiB, POST /api/v1/traces' 1 MiB) is refused with 413. A refusal is
// the final answer, JSON as everywhere, and fasthttp closes the connection
// after it (the client may already be sending). A body without Content-Length
// (chunked) is invited; its size is checked as it is read.
func (s *Server) expect(ctx *fasthttp.RequestCtx) int {
	s.armWrite(ctx) // the 100 Continue, or the refusal, is written next
	if s.cfg.Auth != nil {
		if _, ok := s.cfg.Auth.Authorize(ctx); !ok {
			return ctx.Response.StatusCode()
		}
	}
	if limit, name := s.bodyLimit(ctx.Path()); ctx.Request.Header.ContentLength() > limit {
		writeErr(ctx, fasthttp.StatusRequestEntityTooLarge, "request body exceeds "+name)
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}
