package fastapi

import (
	"bytes"
	"github.com/queenmq/queen-go/internal/logbuf"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/queenmq/queen-go/internal/ratelog"
)

const (
	secretJWT    = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZWNyZXQtdXNlciJ9.c2lnbmF0dXJlLXNlY3JldC1ieXRlcw"
	secretOpaque = "opaque-SECRET-7f3a9c"
	secretCookie = "session-SECRET-1b2c"
	secretQuery  = "query-SECRET-5d6e"
)

var secrets = []string{secretJWT, secretOpaque, secretCookie, secretQuery, "c2lnbmF0dXJl", "SECRET"}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"Authorization: Bearer " + secretJWT + "\r\nHost: x\r\n",
		`contents: "GET / HTTP/1.1\r\nauthorization: Bearer ` + secretOpaque + `\r\nHost: x\r\n\r\n"`,
		`"POST /p HTTP/1.1\r\nProxy-Authorization: Basic ` + secretOpaque + `\r\n"`,
		"Cookie: a=\"b\"; sid=" + secretCookie + "\r\n",
		`"Cookie: a=\"b\"; sid=` + secretCookie + `\r\nX: y"`,
		`Set-Cookie: sid=` + secretCookie,
		`X-Api-Key: ` + secretOpaque,
		`GET /api/v1/pop/queue/q?token=` + secretQuery + `&batch=1 HTTP/1.1`,
		`/x?access_token=` + secretQuery,
		`/x?a=1&apiKey=` + secretQuery + `#frag`,
		`"GET /x?password=` + secretQuery + ` HTTP/1.1\r\n"`,
		`error: token ` + secretJWT + ` rejected`,
		`bearer ` + secretOpaque,
		// truncated by fasthttp's snippet in the middle of the value
		`contents: "GET / HTTP/1.1\r\nAuthorization: Bearer ` + secretOpaque[:10] + `"..."` + secretOpaque[10:] + `\r\n\r\n"`,
	} {
		out := redact(in)
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("redact(%q) = %q: still holds %q", in, out, s)
			}
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("redact(%q) = %q: nothing redacted", in, out)
		}
	}
	// What is not a credential stays.
	keep := `error when serving connection "127.0.0.1:6632"<->"127.0.0.1:5000": cannot find http request method; Host: broker; Content-Type: application/json; /api/v1/pop/queue/q?batch=10&wait=true`
	if out := redact(keep); out != keep {
		t.Errorf("redact changed a line without credentials:\n in %q\nout %q", keep, out)
	}
}

// TestFasthttpLogLinesRedacted runs a real fasthttp server told to quote
// request heads in its errors (SecureErrorLogMessage off, the worst case)
// with fasthttpLogger, sends heads full of credentials that fasthttp
// refuses, and checks the lines reached slog without any of them.
func TestFasthttpLogLinesRedacted(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	srv := &fasthttp.Server{
		Handler:               func(ctx *fasthttp.RequestCtx) {},
		SecureErrorLogMessage: false,
		Logger:                fasthttpLogger{ratelog.New(slog.New(slog.NewTextHandler(&logs, nil)), time.Nanosecond)},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	heads := []string{
		// no Host: refused after the head is read
		"GET /x?access_token=" + secretQuery + " HTTP/1.1\r\nAuthorization: Bearer " + secretJWT + "\r\nCookie: sid=" + secretCookie + "\r\n\r\n",
		// the client leaves in the middle of its headers
		"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secretOpaque + "\r\nCookie: sid=" + secretCookie + "\r\n",
	}
	for _, h := range heads {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(h)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(c)
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(logs.String(), "error when serving connection") < len(heads) {
		if time.Now().After(deadline) {
			t.Fatalf("fasthttp's lines did not reach slog; log:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("log holds %q:\n%s", s, out)
		}
	}
	if !strings.Contains(out, "contents:") || !strings.Contains(out, redacted) {
		t.Errorf("want fasthttp's quoted head with the credentials redacted; log:\n%s", out)
	}
}
