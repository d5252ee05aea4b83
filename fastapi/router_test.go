package fastapi

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestUnknownRoutesAndPreflight: OPTIONS answers 204 with the CORS headers
// on every path, a route or not (docs/api.md, "Conventions"); any other
// method on an unknown path is 404 with "code":"no_such_route", and a
// route's path with a method it does not serve is 405.
func TestUnknownRoutesAndPreflight(t *testing.T) {
	t.Parallel()
	s, err := New(Config{}, fullDeps())
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, uri string) *fasthttp.Response {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		s.srv.Handler(&ctx)
		return &ctx.Response
	}
	for _, uri := range []string{"/api/v1/push", "/health", "/whatever", "/api/v1/nothing/at/all", "/"} {
		r := do(fasthttp.MethodOptions, uri)
		if r.StatusCode() != fasthttp.StatusNoContent || len(r.Body()) != 0 {
			t.Errorf("OPTIONS %s: %d %q, want 204 and no body", uri, r.StatusCode(), r.Body())
		}
		if o, m := string(r.Header.Peek("Access-Control-Allow-Origin")), string(r.Header.Peek("Access-Control-Allow-Methods")); o != "*" || !strings.Contains(m, "OPTIONS") {
			t.Errorf("OPTIONS %s: CORS origin %q, methods %q", uri, o, m)
		}
	}
	for _, c := range []struct {
		method, uri string
		status      int
		body        string
	}{
		{"GET", "/whatever", 404, `"code":"no_such_route"`},
		{"POST", "/api/v1/nothing", 404, `"code":"no_such_route"`},
		{"PUT", "/api/v1/push", 405, `{"error":"method not allowed"}`},
	} {
		r := do(c.method, c.uri)
		if r.StatusCode() != c.status || !strings.Contains(string(r.Body()), c.body) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.uri, r.StatusCode(), r.Body(), c.status, c.body)
		}
	}
}
