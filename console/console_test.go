package console

import (
	"errors"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// serve runs one request through h.Wrap in memory; the wrapped handler
// answers 418 so a test can tell "passed through" from "served".
func serve(t *testing.T, h *Handler, method, path string, hdr map[string]string) *fasthttp.Response {
	t.Helper()
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	for k, v := range hdr {
		ctx.Request.Header.Set(k, v)
	}
	h.Wrap(func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(fasthttp.StatusTeapot) })(&ctx)
	var r fasthttp.Response
	ctx.Response.CopyTo(&r)
	return &r
}

func TestConsoleServesEmbeddedFiles(t *testing.T) {
	t.Parallel()
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", "<title>queen-go console</title>"},
		{"/index.html", "text/html; charset=utf-8", "assets/app.js"},
		{"/assets/app.js", "text/javascript; charset=utf-8", "import"},
		{"/assets/style.css", "text/css; charset=utf-8", "--accent"},
		{"/assets/vendor/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8", "uPlot"},
		{"/assets/vendor/uplot/LICENSE.txt", "text/plain; charset=utf-8", "MIT"},
		{"/assets/favicon.svg", "image/svg+xml", "<svg"},
	} {
		r := serve(t, h, "GET", tc.path, nil)
		if r.StatusCode() != 200 || string(r.Header.ContentType()) != tc.ctype || !strings.Contains(string(r.Body()), tc.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", tc.path, r.StatusCode(), r.Header.ContentType(), tc.contains,
				strings.Contains(string(r.Body()), tc.contains))
		}
		if got := string(r.Header.Peek("Content-Security-Policy")); got != ContentSecurityPolicy {
			t.Errorf("GET %s: CSP %q", tc.path, got)
		}
		if string(r.Header.Peek("X-Content-Type-Options")) != "nosniff" {
			t.Errorf("GET %s: no nosniff", tc.path)
		}
	}
}

// TestNothingExternal: the page and its scripts and styles name no other
// origin (the CSP would block it; this catches it before a browser does).
func TestConsoleNothingExternal(t *testing.T) {
	t.Parallel()
	url := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import|fetch\(\s*["']https?:`)
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "/vendor/") {
			return err
		}
		b, err := fs.ReadFile(static, p)
		if err != nil {
			return err
		}
		if m := url.Find(b); m != nil {
			t.Errorf("%s refers to another origin: %q", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConsoleHeadAndRevalidation(t *testing.T) {
	t.Parallel()
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	get := serve(t, h, "GET", "/assets/app.js", nil)
	etag := string(get.Header.Peek("ETag"))
	if etag == "" || string(get.Header.Peek("Cache-Control")) != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, get.Header.Peek("Cache-Control"))
	}
	if r := serve(t, h, "GET", "/assets/app.js", map[string]string{"If-None-Match": etag}); r.StatusCode() != 304 || len(r.Body()) != 0 {
		t.Errorf("If-None-Match: %d with %d body bytes, want 304 and none", r.StatusCode(), len(r.Body()))
	}
	if r := serve(t, h, "HEAD", "/", nil); r.StatusCode() != 200 {
		t.Errorf("HEAD /: %d", r.StatusCode())
	}
}

func TestConsolePassesEverythingElseThrough(t *testing.T) {
	t.Parallel()
	h, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range [][2]string{
		{"POST", "/"}, {"DELETE", "/index.html"}, {"GET", "/api/v1/resources/overview"}, {"GET", "/health"},
		{"GET", "/metrics"}, {"GET", "/assets/"}, {"GET", "/assets/nope.js"}, {"GET", "/assets/../index.html.bak"},
		{"GET", "/static/index.html"}, {"OPTIONS", "/"},
	} {
		if r := serve(t, h, tc[0], tc[1], nil); r.StatusCode() != fasthttp.StatusTeapot {
			t.Errorf("%s %s: %d, want it passed to the API handler", tc[0], tc[1], r.StatusCode())
		}
	}
}

func TestConsolePathPrefix(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Path: "/ops/console"})
	if err != nil {
		t.Fatal(err)
	}
	if h.Prefix() != "/ops/console/" {
		t.Fatalf("prefix %q", h.Prefix())
	}
	if r := serve(t, h, "GET", "/ops/console/", nil); r.StatusCode() != 200 || !strings.Contains(string(r.Body()), "<title>") {
		t.Errorf("GET prefix: %d", r.StatusCode())
	}
	if r := serve(t, h, "GET", "/ops/console/assets/app.js", nil); r.StatusCode() != 200 {
		t.Errorf("GET prefix asset: %d", r.StatusCode())
	}
	r := serve(t, h, "GET", "/ops/console", nil)
	if r.StatusCode() != 301 || !strings.HasSuffix(string(r.Header.Peek("Location")), "/ops/console/") {
		t.Errorf("GET prefix without slash: %d to %q, want 301 to /ops/console/", r.StatusCode(), r.Header.Peek("Location"))
	}
	for _, p := range []string{"/", "/assets/app.js", "/ops/", "/ops/console/nope"} {
		if r := serve(t, h, "GET", p, nil); r.StatusCode() != fasthttp.StatusTeapot {
			t.Errorf("GET %s: %d, want it passed through", p, r.StatusCode())
		}
	}
}

func TestConsoleDisabled(t *testing.T) {
	t.Parallel()
	h, err := New(Config{Disabled: true})
	if err != nil || h != nil {
		t.Fatalf("New(Disabled) = %v, %v; want nil, nil", h, err)
	}
	if r := serve(t, h, "GET", "/", nil); r.StatusCode() != fasthttp.StatusTeapot {
		t.Errorf("GET / with the console off: %d, want it passed through", r.StatusCode())
	}
}

func TestConsoleNormalizePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "/", "/": "/", "/console": "/console/", "/a/b/": "/a/b/", "/ops//": "/ops/", "/a-b_c.d~e": "/a-b_c.d~e/"} {
		if got, err := NormalizePath(in); err != nil || got != want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"console", "/a/../b", "/a/./b", "/a//b", "/api", "/api/", "/api/console", "/health", "/metrics/x", "/debug/pprof", "/a b", "/a?b", "/%2e%2e"} {
		if _, err := NormalizePath(in); !errors.Is(err, ErrBadPath) {
			t.Errorf("NormalizePath(%q): %v, want ErrBadPath", in, err)
		}
	}
}
