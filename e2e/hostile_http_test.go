package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/logbuf"
)

// The hostile-input findings about the HTTP layer: what a client can send
// that fasthttp handles on its own unless told otherwise.

// withLog makes the broker log everything to buf.
func withLog(buf *logbuf.Buffer) func(*broker.Config) {
	return func(c *broker.Config) {
		c.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// rawConn dials the broker for hand-written HTTP.
func rawConn(t *testing.T, base string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// readAnswer reads one response from br; its body must be JSON
// {"error": ...} when wantError.
func readAnswer(t *testing.T, br *bufio.Reader, what string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no readable answer: %v", what, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: reading the body: %v", what, err)
	}
	return resp, b
}

// wantJSONError checks status and a JSON {"error"} body containing want.
func wantJSONError(t *testing.T, what string, resp *http.Response, b []byte, status int, want string) {
	t.Helper()
	var e struct{ Error string }
	if resp.StatusCode != status || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, want) {
		t.Fatalf("%s: %d %s, want %d with JSON error containing %q", what, resp.StatusCode, b, status, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q, want application/json", what, ct)
	}
}

// TestCaseTokenNeverLogged: a request head that fasthttp refuses (no
// Host, a client leaving mid-headers) used to be printed by fasthttp's own
// logger straight to stderr, Authorization and Cookie included. The line
// must reach the broker's slog logger, without any credential.
func TestCaseTokenNeverLogged(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	s := authSetup(t, withLog(&logs))
	tok := token(t, "log-user", []string{"admin"}, "valid")
	for _, head := range []string{
		"POST /api/v1/push?access_token=" + tok + " HTTP/1.1\r\nAuthorization: Bearer " + tok + "\r\nCookie: sid=cookie-secret-42\r\n\r\n",
		"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\nCookie: sid=cookie-secret-42\r\nContent-Le",
	} {
		c, br := rawConn(t, s.base)
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, br)
	}
	waitLog(t, &logs, "error when serving connection")
	out := logs.String()
	sig := tok[strings.LastIndexByte(tok, '.')+1:]
	for _, secret := range []string{tok, sig, "cookie-secret-42"} {
		if strings.Contains(out, secret) {
			t.Fatalf("the log holds a credential %q:\n%s", secret, out)
		}
	}
}

// waitLog waits until the log holds want.
func waitLog(t *testing.T, logs *logbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the broker's log never got %q (fasthttp's lines must go through slog); log:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCaseLargeHeaders: a 16 KiB cookie, a 20 KiB URL, forwarding headers
// and a big JWT are served; a head over QUEEN_MAX_HEADER_BYTES answers 431
// (headers) or 414 (request line) as readable JSON, on a fresh connection
// and after earlier requests on a kept-alive one; the limit is configurable.
func TestCaseLargeHeaders(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	big := func(n int) string { return strings.Repeat("a", n) }

	// Served: 16 KiB cookie + forwarding headers, and a 20 KiB URL.
	req, _ := http.NewRequest("GET", s.base+"/health", nil)
	req.Header.Set("Cookie", "dash="+big(16<<10))
	req.Header.Set("X-Forwarded-For", strings.Repeat("10.0.0.1, ", 100))
	req.Header.Set("Authorization", "Bearer "+big(6<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a 23 KiB head: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a 23 KiB head: %d, want 200", resp.StatusCode)
	}
	if code := healthCodeURL(t, s.base+"/health?pad="+big(20<<10)); code != 200 {
		t.Fatalf("a 20 KiB URL: %d, want 200", code)
	}

	// Over the limit, through Go's client: the answer is readable.
	req, _ = http.NewRequest("GET", s.base+"/health", nil)
	req.Header.Set("Cookie", "dash="+big(40<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a 40 KiB cookie: the answer was lost: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantJSONError(t, "40 KiB cookie", resp, b, http.StatusRequestHeaderFieldsTooLarge, "QUEEN_MAX_HEADER_BYTES")

	resp, err = http.Get(s.base + "/health?pad=" + big(40<<10))
	if err != nil {
		t.Fatalf("a 40 KiB URL: the answer was lost: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	wantJSONError(t, "40 KiB URL", resp, b, http.StatusRequestURITooLong, "request line")

	// On one kept-alive connection, after a push whose body has no LF.
	for _, c := range []struct {
		name, head string
		status     int
	}{
		{"headers", "GET /health HTTP/1.1\r\nHost: x\r\nCookie: " + big(40<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"request line", "GET /health?pad=" + big(40<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusRequestURITooLong},
		{"many small headers", "GET /health HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Pad: "+big(50)+"\r\n", 700) + "\r\n", http.StatusRequestHeaderFieldsTooLarge},
	} {
		conn, br := rawConn(t, s.base)
		pushBody := string(body(item{Queue: "hq", Payload: big(40 << 10)}))
		fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(pushBody), pushBody)
		if resp, b := readAnswer(t, br, c.name+": first push"); resp.StatusCode != 201 {
			t.Fatalf("%s: first push %d %s", c.name, resp.StatusCode, b)
		}
		if _, err := conn.Write([]byte(c.head)); err != nil {
			t.Fatal(err)
		}
		resp, b := readAnswer(t, br, c.name)
		wantJSONError(t, c.name+" after a push on the same connection", resp, b, c.status, "QUEEN_MAX_HEADER_BYTES")
	}

	// Configurable: 8 KiB refuses a 10 KiB cookie.
	small := setup(t, func(c *broker.Config) { c.HTTP.MaxHeaderBytes = 8 << 10 })
	req, _ = http.NewRequest("GET", small.base+"/health", nil)
	req.Header.Set("Cookie", "dash="+big(10<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	wantJSONError(t, "10 KiB cookie, 8 KiB limit", resp, b, http.StatusRequestHeaderFieldsTooLarge, "QUEEN_MAX_HEADER_BYTES")
}

func healthCodeURL(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %.60s...: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// expectExchange sends head (with Expect: 100-continue) and reads the
// first answer. On "100 Continue" it sends body and returns the final one.
func expectExchange(t *testing.T, base, head, reqBody string) (*http.Response, []byte, bool) {
	t.Helper()
	conn, br := rawConn(t, base)
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	resp, b := readAnswer(t, br, "answer to Expect")
	if resp.StatusCode != http.StatusContinue {
		return resp, b, false
	}
	if _, err := conn.Write([]byte(reqBody)); err != nil {
		t.Fatal(err)
	}
	resp, b = readAnswer(t, br, "answer after 100 Continue")
	return resp, b, true
}

// TestCaseExpectContinueChecksFirst: "Expect: 100-continue" is answered
// after authentication and the size check: a body over the limit is not
// invited (413), nor one without a valid token (401) or with the wrong
// role (403); a request that would be served is invited and served.
func TestCaseExpectContinueChecksFirst(t *testing.T) {
	t.Parallel()
	s := authSetup(t, func(c *broker.Config) { c.MaxBodyBytes = 1 << 20 })
	writer := token(t, "w", []string{"write-only"}, "valid")
	reader := token(t, "r", []string{"read-only"}, "valid")
	small := string(body(item{Queue: "eq", Payload: 1}))
	head := func(tok string, length int) string {
		h := "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n", length)
		if tok != "" {
			h += "Authorization: Bearer " + tok + "\r\n"
		}
		return h + "\r\n"
	}
	for _, c := range []struct {
		name, tok string
		length    int
		status    int
		want      string
	}{
		{"no token", "", len(small), 401, "authentication required"},
		{"bad token", token(t, "w", []string{"write-only"}, "expired"), len(small), 401, "invalid token"},
		{"wrong role", reader, len(small), 403, "insufficient permissions"},
		{"50 MB over a 1 MiB limit", writer, 50 << 20, 413, "QUEEN_MAX_BODY_BYTES"},
		{"50 MB and no token", "", 50 << 20, 401, "authentication required"},
	} {
		resp, b, invited := expectExchange(t, s.base, head(c.tok, c.length), "")
		if invited {
			t.Fatalf("%s: invited with 100 Continue", c.name)
		}
		wantJSONError(t, c.name, resp, b, c.status, c.want)
	}
	resp, b, invited := expectExchange(t, s.base, head(writer, len(small)), small)
	if !invited || resp.StatusCode != 201 {
		t.Fatalf("a valid push: invited %v, then %d %s; want 100 then 201", invited, resp.StatusCode, b)
	}

	// Without auth, the size check alone.
	open := setup(t, func(c *broker.Config) { c.MaxBodyBytes = 1 << 20 })
	resp, b, invited = expectExchange(t, open.base, head("", 50<<20), "")
	if invited {
		t.Fatal("50 MB without auth: invited")
	}
	wantJSONError(t, "50 MB without auth", resp, b, 413, "QUEEN_MAX_BODY_BYTES")

	// ack/batch has its own, lower limit (8 MiB), judged before the body
	// too; under a global limit below it, the global one is named.
	big := setup(t, nil)
	ackHead := "POST /api/v1/ack/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", 9<<20)
	if resp, b, invited = expectExchange(t, big.base, ackHead, ""); invited {
		t.Fatal("a 9 MiB ack/batch: invited")
	}
	wantJSONError(t, "9 MiB ack/batch", resp, b, 413, "the ack/batch limit of 8 MiB")
	code, ab := post(t, open.base, "/api/v1/ack/batch", []byte(`{"acknowledgments":[{"transactionId":"`+strings.Repeat("x", 2<<20)+`"}]}`))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(ab), "QUEEN_MAX_BODY_BYTES") {
		t.Fatalf("a 2 MiB ack/batch under a 1 MiB global limit: %d %s", code, ab)
	}
}

// TestCaseHeadOnGetRoutes: HEAD answers as GET does, without a body, on
// the routes health checks and load balancers probe; pop (which leases) is
// not served by HEAD; auth applies to HEAD as to GET.
func TestCaseHeadOnGetRoutes(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	push(t, s.base, body(item{Queue: "headq", Payload: 1}))
	for _, path := range []string{"/health", "/metrics", "/api/v1/resources/queues", "/api/v1/resources/queues/headq",
		"/api/v1/system/maintenance", "/api/v1/resources/overview", "/api/v1/resources/queues/nothere"} {
		get, err := http.Get(s.base + path)
		if err != nil {
			t.Fatal(err)
		}
		getBody, _ := io.ReadAll(get.Body)
		get.Body.Close()
		head, err := http.Head(s.base + path)
		if err != nil {
			t.Fatalf("HEAD %s: %v", path, err)
		}
		headBody, _ := io.ReadAll(head.Body)
		head.Body.Close()
		if head.StatusCode != get.StatusCode || len(headBody) != 0 || head.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
			t.Fatalf("HEAD %s: %d %q (%d body bytes); GET: %d %q", path, head.StatusCode, head.Header.Get("Content-Type"),
				len(headBody), get.StatusCode, get.Header.Get("Content-Type"))
		}
		if path == "/health" && head.ContentLength != int64(len(getBody)) {
			t.Fatalf("HEAD /health: Content-Length %d, GET's body is %d bytes", head.ContentLength, len(getBody))
		}
	}
	for _, path := range []string{"/api/v1/pop/queue/headq", "/api/v1/pop?namespace=headq"} {
		head, err := http.Head(s.base + path)
		if err != nil {
			t.Fatal(err)
		}
		head.Body.Close()
		if head.StatusCode != http.StatusMethodNotAllowed || head.Header.Get("Allow") != "GET" {
			t.Fatalf("HEAD %s: %d Allow %q, want 405 Allow GET", path, head.StatusCode, head.Header.Get("Allow"))
		}
	}
	// The HEAD did not lease the message: a pop gets it.
	code, b := do(t, "GET", s.base+"/api/v1/pop/queue/headq?batch=1", "", nil)
	if code != 200 || !strings.Contains(string(b), `"messages":[{`) {
		t.Fatalf("pop after HEAD: %d %s, want the message", code, b)
	}
	// HEAD on a POST-only route is still 405.
	if head, err := http.Head(s.base + "/api/v1/push"); err != nil || head.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("HEAD /api/v1/push: %v %v, want 405", head.StatusCode, err)
	}

	a := authSetup(t, nil)
	for _, c := range []struct {
		tok  string
		want int
	}{{"", 401}, {token(t, "r", []string{"read-only"}, "valid"), 200}, {token(t, "w", []string{"write-only"}, "valid"), 403}} {
		code, b := do(t, "HEAD", a.base+"/api/v1/resources/queues", c.tok, nil)
		if code != c.want || len(b) != 0 {
			t.Fatalf("HEAD with auth (%q): %d (%d body bytes), want %d", c.tok, code, len(b), c.want)
		}
	}
}

// TestCaseBodyShorterThanContentLength: a Content-Length longer than the
// body, or a head that never ends, is answered 408 (JSON) when the read
// timeout passes, not 400 (and not after 30 s: the timeout is the
// broker's QUEEN_READ_TIMEOUT_MS, short here).
func TestCaseBodyShorterThanContentLength(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	s := setup(t, func(c *broker.Config) { c.HTTP.ReadTimeout = timeout })
	for _, c := range []struct{ name, req string }{
		{"short body", "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"items\":"},
		{"unfinished head", "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Len"},
		// past what fasthttp reads ahead: the handler's read times out
		{"long body cut short", "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"items\":[" + strings.Repeat(" ", 200<<10)},
	} {
		conn, br := rawConn(t, s.base)
		start := time.Now()
		if _, err := conn.Write([]byte(c.req)); err != nil {
			t.Fatal(err)
		}
		resp, b := readAnswer(t, br, c.name)
		wantJSONError(t, c.name, resp, b, http.StatusRequestTimeout, "QUEEN_READ_TIMEOUT_MS")
		if took := time.Since(start); took < timeout/2 || took > 10*timeout {
			t.Fatalf("%s: answered after %v with a %v read timeout", c.name, took, timeout)
		}
	}
}

// TestCaseLoneSurrogateNames: lone surrogate escapes in names and ids are
// refused with 400 naming the field, on every route that takes them in a
// JSON body; "t\ud800" and "t\udfff" no longer collide; a payload keeps
// its lone surrogate byte for byte.
func TestCaseLoneSurrogateNames(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	for _, c := range []struct{ path, body, field string }{
		{"/api/v1/push", `{"items":[{"queue":"sq\ud800","payload":1}]}`, "items[0].queue"},
		{"/api/v1/push", `{"items":[{"queue":"sq","partition":"p\udbff","payload":1}]}`, "items[0].partition"},
		{"/api/v1/push", `{"items":[{"queue":"sq","payload":1,"transactionId":"t\ud800"}]}`, "items[0].transactionId"},
		{"/api/v1/configure", `{"queue":"sq\ud800","options":{}}`, "queue"},
		{"/api/v1/configure", `{"queue":"sq","namespace":"n\udfff","options":{}}`, "namespace"},
		{"/api/v1/ack", `{"transactionId":"t\udfff","partitionId":"0190c1d2-0000-7000-8000-000000000001"}`, "transactionId"},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"a","partitionId":"0190c1d2-0000-7000-8000-000000000001"},{"transactionId":"t\ud800","partitionId":"0190c1d2-0000-7000-8000-000000000001"}]}`, "acknowledgments[1].transactionId"},
		{"/api/v1/ack/batch", `{"consumerGroup":"g\ud800","acknowledgments":[]}`, "consumerGroup"},
		{"/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"tq\ud800","payload":1}]}]}`, "operations[0].items[0].queue"},
		{"/api/v1/transaction", `{"operations":[{"type":"ack","transactionId":"t\ud800","partitionId":"0190c1d2-0000-7000-8000-000000000001"}]}`, "operations[0].transactionId"},
		{"/api/v1/traces", `{"transactionId":"t\udc00","partitionId":"0190c1d2-0000-7000-8000-000000000001","data":{}}`, "transactionId"},
		{"/api/v1/traces", `{"transactionId":"t","partitionId":"0190c1d2-0000-7000-8000-000000000001","data":{},"traceNames":["n\ud800"]}`, "traceNames[0]"},
		{"/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"2025\ud800"}`, "subscriptionTimestamp"},
	} {
		code, b := post(t, s.base, c.path, []byte(c.body))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || !strings.HasPrefix(e.Error, c.field+" contains a lone surrogate") {
			t.Errorf("POST %s %s: %d %s, want 400 naming %s", c.path, c.body, code, b, c.field)
		}
	}
	// The pair collision is gone: both refused, nothing stored.
	if n := len(readQueue(t, s.store, "sq")); n != 0 {
		t.Fatalf("queue sq holds %d messages after refused pushes", n)
	}
	// Pairs are characters; lone surrogates in payloads stay.
	res := push(t, s.base, []byte(`{"items":[{"queue":"sq\ud83d\ude00","payload":{"s":"\ud800\udfff x \udbff"},"transactionId":"t\ud83d\ude00"}]}`))
	wantStatuses(t, res, Q)
	msgs := readQueue(t, s.store, "sq😀")
	if len(msgs) != 1 || msgs[0].TransactionID != "t😀" || string(msgs[0].Payload) != `{"s":"\ud800\udfff x \udbff"}` {
		t.Fatalf("stored %+v, want transactionId t😀 and the payload byte for byte", msgs)
	}
	code, b := post(t, s.base, "/api/v1/transaction", []byte(`{"operations":[{"type":"push","items":[{"queue":"sq2","payload":"\ud800","transactionId":"x"}]}]}`))
	if code != 200 || !strings.Contains(string(b), `"success":true`) {
		t.Fatalf("transaction push with a lone surrogate in the payload: %d %s", code, b)
	}
	if msgs := readQueue(t, s.store, "sq2"); len(msgs) != 1 || string(msgs[0].Payload) != `"\ud800"` {
		t.Fatalf("transaction payload stored as %+v, want \"\\ud800\" byte for byte", msgs)
	}
}

// TestCaseBadTextIs400: text PostgreSQL cannot store (a NUL character,
// bytes that are not UTF-8), names too long, and lone surrogate escapes
// are refused with 400 naming the problem on the routes that once passed
// them to PostgreSQL (500) or decoded them into U+FFFD (a different name
// than the client sent); nothing is created.
func TestCaseBadTextIs400(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	uuidZero := "00000000-0000-0000-0000-000000000000"
	long := strings.Repeat("n", 300)
	for _, tt := range []struct {
		method, path, body, want string
	}{
		{"GET", "/api/v1/dlq?queue=%00", "", `{"error":"queue must be 1..255 bytes of UTF-8 without control characters"}`},
		{"GET", "/api/v1/dlq?consumerGroup=%00", "", `{"error":"consumerGroup must be 1..255 bytes of UTF-8 without control characters"}`},
		{"GET", "/api/v1/dlq?partition=%00", "", `{"error":"partition must be 1..255 bytes of UTF-8 without control characters"}`},
		{"GET", "/api/v1/dlq?queue=%ff", "", `{"error":"queue must be 1..255 bytes of UTF-8 without control characters"}`},
		{"GET", "/api/v1/dlq?from=2026-01-02&to=2026-01-01", "", `{"error":"from must not be after to"}`},
		{"GET", "/api/v1/pop/queue/" + strings.Repeat("q", 256), "", `{"error":"invalid queue name: is longer than 255 bytes"}`},
		{"GET", "/api/v1/pop/queue/a%00b", "", `{"error":"invalid queue name: contains a control character"}`},
		{"POST", "/streams/v1/queries", `{"name":"a\u0000b","source_queue":"sq","config_hash":"h"}`, `{"error":"name must be 1..255 bytes of UTF-8 without control characters"}`},
		{"POST", "/streams/v1/queries", `{"name":"` + long + `","source_queue":"sq","config_hash":"h"}`, `{"error":"name must be 1..255 bytes of UTF-8 without control characters"}`},
		{"POST", "/streams/v1/queries", `{"name":"a\ud800","source_queue":"sq","config_hash":"h"}`, `{"error":"name contains a lone surrogate escape (\\uD800-\\uDFFF not in a high-low pair)"}`},
		{"POST", "/streams/v1/queries", `{"name":"q","source_queue":"sq","config_hash":"h\u0000"}`, `{"error":"config_hash must be UTF-8 without a NUL character"}`},
		{"POST", "/streams/v1/queries", `{"name":"q","source_queue":"sq","config_hash":"` + strings.Repeat("h", 1025) + `"}`, `{"error":"config_hash is longer than 1024 bytes"}`},
		{"POST", "/streams/v1/queries", `{"name":5,"source_queue":"sq","config_hash":"h"}`, `{"error":"name must be a string"}`},
		{"POST", "/streams/v1/queries", "{\"name\":\"q\xff\",\"source_queue\":\"sq\",\"config_hash\":\"h\"}", `{"error":"request body is not valid UTF-8"}`},
		{"POST", "/streams/v1/state/get", `{"query_id":"` + uuidZero + `","partition_id":"` + uuidZero + `","keys":["a\u0000"]}`, `{"error":"keys[0] contains a NUL character"}`},
		{"POST", "/streams/v1/state/get", `{"query_id":"` + uuidZero + `","partition_id":"` + uuidZero + `","key_prefix":"a\u0000"}`, `{"error":"key_prefix contains a NUL character"}`},
		{"POST", "/api/v1/configure", "{\"queue\":\"cfg\xffX\"}", `{"error":"request body is not valid UTF-8"}`},
		{"POST", "/api/v1/ack", "{\"transactionId\":\"a\xffb\",\"partitionId\":\"" + uuidZero + "\"}", `{"error":"request body is not valid UTF-8"}`},
		{"POST", "/api/v1/ack/batch", "{\"acknowledgments\":[{\"transactionId\":\"a\xffb\",\"partitionId\":\"" + uuidZero + "\"}]}", `{"error":"request body is not valid UTF-8"}`},
	} {
		code, b := do(t, tt.method, s.base+tt.path, "", []byte(tt.body))
		if code != http.StatusBadRequest || string(b) != tt.want {
			t.Errorf("%s %s %.80q: %d %s, want 400 %s", tt.method, tt.path, tt.body, code, b, tt.want)
		}
	}
	if code, _ := get(t, s.base+"/api/v1/resources/queues/cfg%EF%BF%BDX"); code != http.StatusNotFound {
		t.Errorf("the refused configure created a queue: %d", code)
	}
}

// TestCaseHugeContentLengthAnsweredAtOnce: a Content-Length over the body
// limit with a body that stops coming is answered 413 within a few seconds
// (the drain's bound), not after the 30 s read timeout. (The HTTP server
// reads the first 8 KiB of a body before any handler runs, so a body that
// stops short of that still waits for the read timeout: 408.)
func TestCaseHugeContentLengthAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	c, br := rawConn(t, s.base)
	start := time.Now()
	if _, err := io.WriteString(c, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{\"items\":[\""+strings.Repeat("x", 9000)); err != nil {
		t.Fatal(err)
	}
	resp, b := readAnswer(t, br, "huge Content-Length")
	wantJSONError(t, "huge Content-Length", resp, b, http.StatusRequestEntityTooLarge, "QUEEN_MAX_BODY_BYTES")
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("413 after %v", d)
	}
}

// TestCaseAckBatchBounded: an ack/batch is at most 10,000 acknowledgments
// (the largest pop) and 8 MiB; more is refused before anything is applied
// (a 62 MB body of 780,000 acks took hundreds of MB to decode).
func TestCaseAckBatchBounded(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ack := `{"transactionId":"t","partitionId":"00000000-0000-0000-0000-000000000000"}`
	many := `{"acknowledgments":[` + strings.TrimSuffix(strings.Repeat(ack+",", 10001), ",") + `]}`
	code, b := post(t, s.base, "/api/v1/ack/batch", []byte(many))
	if code != http.StatusBadRequest || string(b) != `{"error":"the batch has 10001 acknowledgments; at most 10000 are accepted per request"}` {
		t.Errorf("10,001 acks: %d %s", code, b)
	}
	huge := `{"acknowledgments":[{"transactionId":"` + strings.Repeat("x", 9<<20) + `"}]}`
	code, b = post(t, s.base, "/api/v1/ack/batch", []byte(huge))
	if code != http.StatusRequestEntityTooLarge || string(b) != `{"error":"request body exceeds the ack/batch limit of 8 MiB"}` {
		t.Errorf("9 MiB ack/batch: %d %.200s", code, b)
	}
}

// TestCasePushPartitionsBounded: a push naming more than 1,000 distinct
// partitions is refused whole (400, nothing stored); many items over few
// partitions are not.
func TestCasePushPartitionsBounded(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	var wide, narrow []item
	for i := range 1001 {
		wide = append(wide, item{"ppb", fmt.Sprint("p", i), i, ""})
	}
	for i := range 2000 {
		narrow = append(narrow, item{"ppb2", fmt.Sprint("p", i%10), i, ""})
	}
	code, b := post(t, s.base, "/api/v1/push", body(wide...))
	if code != http.StatusBadRequest || !strings.Contains(string(b), "at most 1000 are accepted per request (QUEEN_MAX_PUSH_PARTITIONS)") {
		t.Fatalf("1,001 partitions: %d %s", code, b)
	}
	if n := len(readQueue(t, s.store, "ppb")); n != 0 {
		t.Fatalf("refused push stored %d", n)
	}
	if code, b := post(t, s.base, "/api/v1/push", body(narrow...)); code != http.StatusCreated {
		t.Fatalf("2,000 items over 10 partitions: %d %.200s", code, b)
	}
	// The transaction route's pushes, whose queues are created on the
	// request's time, are bounded alike: over all its push operations.
	half := func(from, to int) map[string]any {
		var items []map[string]any
		for i := from; i < to; i++ {
			items = append(items, map[string]any{"queue": fmt.Sprint("ppt", i), "payload": i})
		}
		return map[string]any{"type": "push", "items": items}
	}
	code, res := txCall(t, s.base, half(0, 600), half(600, 1001))
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(res["error"]), "QUEEN_MAX_PUSH_PARTITIONS") {
		t.Fatalf("transaction over 1,001 queues: %d %v", code, res)
	}
	// And a stream cycle's push_items, refused before the cycle runs.
	cycle, _ := json.Marshal(map[string]any{"query_id": "00000000-0000-0000-0000-000000000000",
		"partition_id": "00000000-0000-0000-0000-000000000000", "push_items": half(0, 1001)["items"]})
	if code, b := post(t, s.base, "/streams/v1/cycle", cycle); code != http.StatusBadRequest ||
		!strings.Contains(string(b), "push_items: the request's push items name more than 1000 partitions") {
		t.Fatalf("stream cycle over 1,001 queues: %d %.300s", code, b)
	}
	if code, _ := get(t, s.base+"/api/v1/resources/queues/ppt0"); code != http.StatusNotFound {
		t.Fatalf("the refused transaction created a queue: %d", code)
	}
}

// TestCaseClientThatNeverReads: a client that asks for a large answer and
// never reads it is disconnected once QUEEN_WRITE_TIMEOUT_MS has passed
// since the answer was ready, so the answer's memory does not stay pinned
// for as long as the client stays connected: when it finally reads, it gets
// part of the answer and then the end of the connection.
func TestCaseClientThatNeverReads(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	s := setup(t, func(c *broker.Config) { c.HTTP.WriteTimeout = timeout })
	big := strings.Repeat("y", 24<<20) // far more than the sockets' buffers hold
	wantStatuses(t, push(t, s.base, body(item{"unread", "P", big, "u1"})), Q)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /api/v1/pop/queue/unread?autoAck=true HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * timeout) // reads nothing meanwhile
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, conn) // to the end of the connection (a close, or a reset)
	var ne net.Error
	if n >= int64(len(big)) || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read %d bytes of an answer of more than %d (%v): want it cut short by the write timeout", n, len(big), err)
	}
}

// metricValue is the value of the unlabelled metric name on base's
// /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	code, b := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, l := range strings.Split(b, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// TestCaseManyClientsThatNeverRead: clients that pop large answers and
// never read them (a hostile-input probe: 60 such connections held 450-670
// MB of the broker for the minute of QUEEN_WRITE_TIMEOUT_MS, and another
// client's pop waited seconds behind them) hold little of it and not for
// long. The first answer takes the budget (QUEEN_MAX_PENDING_ANSWER_BYTES);
// while it is not written, every later pop, the unread clients' and a
// well-behaved client's alike, delivers one message, at once; the unread
// connections are cut once they have taken nothing for
// QUEEN_WRITE_STALL_TIMEOUT_MS, their answers' bytes are given back, and
// pops deliver whole batches again; the leased messages of an answer cut
// short return when their lease lapses, as for any delivery that failed.
func TestCaseManyClientsThatNeverRead(t *testing.T) {
	t.Parallel()
	const budget, stall = 16 << 20, 2 * time.Second // the stall long enough for the reading clients of a loaded test run
	s := setup(t, func(c *broker.Config) {
		c.HTTP.MaxPendingAnswerBytes = budget
		c.HTTP.WriteStallTimeout = stall
	})
	configure(t, s.base, "unread", map[string]any{"leaseTime": 2})
	mib := strings.Repeat("y", 1<<20)
	for p := range 2 { // 20 messages of 1 MiB: more than one pop's bound (16 MiB)
		var items []item
		for i := range 10 {
			items = append(items, item{"unread", "P", mib, fmt.Sprintf("m%02d", p*10+i)})
		}
		wantStatuses(t, push(t, s.base, body(items...)), Q, Q, Q, Q, Q, Q, Q, Q, Q, Q)
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	unread := func(group string) net.Conn {
		conn, err := d.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := fmt.Fprintf(conn, "GET /api/v1/pop/queue/unread?batch=100&consumerGroup=%s HTTP/1.1\r\nHost: x\r\n\r\n", group); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	pending := func() float64 { return metricValue(t, s.base, "queen_pop_answer_pending_bytes") }
	waitPending := func(what string, ok func(float64) bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for p := pending(); !ok(p); p = pending() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %.0f bytes of answers pending after 15 s", what, p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	type answer struct {
		TransactionID string `json:"transactionId"`
	}
	pop := func(group string) (int, []answer, time.Duration) {
		t.Helper()
		start := time.Now()
		code, b := get(t, s.base+"/api/v1/pop/queue/unread?batch=100&consumerGroup="+group)
		var a struct{ Messages []answer }
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(b), &a); err != nil {
				t.Fatalf("pop of %s: %v", group, err)
			}
		}
		return code, a.Messages, time.Since(start)
	}

	first := unread("u0")
	sent := time.Now()
	waitPending("the first unread answer", func(p float64) bool { return p > 0 })
	firstSize := pending()
	if firstSize < 15<<20 {
		t.Fatalf("the first unread answer holds %.0f bytes; want about the 16 MiB bound", firstSize)
	}
	for _, g := range []string{"u1", "u2", "u3"} {
		unread(g)
	}
	// Meanwhile a client that reads gets one message, at once, and the
	// answers pending stay near the budget: the first, and one message
	// for each later pop.
	code, msgs, took := pop("w")
	if code != http.StatusOK || len(msgs) != 1 || took > 5*time.Second {
		t.Fatalf("a pop beside the unread answers: %d, %d messages in %v; want 1 message, at once", code, len(msgs), took)
	}
	if p := pending(); p > firstSize+4*(1<<20+4096) {
		t.Fatalf("%.0f bytes of answers pending; want at most the first (%.0f) and one message for each later pop", p, firstSize)
	}
	// The first unread connection is cut after the stall timeout, long
	// before the write timeout (a minute), and its answer given back.
	waitPending("the first unread answer dropped", func(p float64) bool { return p < firstSize })
	if d := time.Since(sent); d > 10*time.Second {
		t.Fatalf("the first unread answer was dropped %v after its pop; want about the stall timeout (%v)", d, stall)
	}
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, first)
	var ne net.Error
	if n >= int64(firstSize) || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("read %d bytes of an answer of %.0f (%v): want it cut short, and the connection closed", n, firstSize, err)
	}
	waitPending("every unread answer dropped or written", func(p float64) bool { return p == 0 })
	// The budget is back: a pop delivers its whole bound again.
	if code, msgs, _ := pop("w2"); code != http.StatusOK || len(msgs) < 10 {
		t.Fatalf("a pop once the unread answers are gone: %d, %d messages; want a full batch (16)", code, len(msgs))
	}
	// The messages of the answer cut short return when the lease lapses.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, msgs, _ := pop("u0")
		if code == http.StatusOK {
			if msgs[0].TransactionID != "m00" {
				t.Fatalf("after the lease of the cut answer lapsed, group u0 got %s first; want m00 again", msgs[0].TransactionID)
			}
			break
		}
		if code != http.StatusNoContent || time.Now().After(deadline) {
			t.Fatalf("pop of group u0 after its cut answer: %d", code)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestCaseExpectContinueAfterIdle: on a kept-alive connection idle for
// longer than QUEEN_WRITE_TIMEOUT_MS, a push with Expect: 100-continue
// still gets its 100 Continue and its answer (the last answer's write
// deadline, long expired, must not meet the 100 Continue), and so does a
// request refused from its head (413).
func TestCaseExpectContinueAfterIdle(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	s := setup(t, func(c *broker.Config) { c.HTTP.WriteTimeout = timeout })
	conn, br := rawConn(t, s.base)
	get := "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
	if _, err := conn.Write([]byte(get)); err != nil {
		t.Fatal(err)
	}
	if resp, _ := readAnswer(t, br, "health"); resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %d", resp.StatusCode)
	}
	time.Sleep(3 * timeout)
	b := body(item{"idle", "P", 1, "i1"})
	if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(b)); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("after %v idle, Expect: 100-continue got %q (%v), want 100 Continue", 3*timeout, line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line ending the interim answer
		t.Fatal(err)
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	if resp, rb := readAnswer(t, br, "push"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("push after 100 Continue: %d %s", resp.StatusCode, rb)
	}
	time.Sleep(3 * timeout)
	if _, err := fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", 1<<40); err != nil {
		t.Fatal(err)
	}
	resp, rb := readAnswer(t, br, "oversized push")
	wantJSONError(t, "oversized push after idle", resp, rb, http.StatusRequestEntityTooLarge, "QUEEN_MAX_BODY_BYTES")
}

// TestCaseStalledUploadsBounded: the bodies being received are bounded all
// together (QUEEN_BODY_MEMORY_BYTES), not only one by one: a connection
// that sends most of a large body and stalls holds its bytes until the
// read timeout, and 60 such held 3.77 GB. With a 1 MiB budget, one stalled
// 800 KB upload leaves no room for a second, which is answered 503 with
// Retry-After at once (and drained, so the answer is readable); a small
// push still goes through meanwhile; once the stalled connection is gone,
// its bytes are given back and a large body is received again.
func TestCaseStalledUploadsBounded(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) { c.MaxBodyBytes = 1 << 20; c.HTTP.BodyMemoryBytes = 1 << 20 })
	const declared = 1_000_000
	head := "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(declared) + "\r\n\r\n"
	stalled, _ := rawConn(t, s.base)
	if _, err := io.WriteString(stalled, head+`{"items":[`+strings.Repeat(" ", 800_000)); err != nil {
		t.Fatal(err)
	}
	// A whole body of the declared length (not a valid push: 400 when it
	// is received, 503 when the budget refuses it).
	large := func() (*http.Response, []byte) {
		c, br := rawConn(t, s.base)
		defer c.Close()
		if _, err := io.WriteString(c, head+strings.Repeat(" ", declared)); err != nil {
			t.Fatal(err)
		}
		return readAnswer(t, br, "large body")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, b := large()
		if resp.StatusCode == http.StatusServiceUnavailable {
			wantJSONError(t, "large body beside a stalled one", resp, b, http.StatusServiceUnavailable, "QUEEN_BODY_MEMORY_BYTES")
			if ra := resp.Header.Get("Retry-After"); ra != "1" {
				t.Fatalf("503 with Retry-After %q, want 1", ra)
			}
			break
		}
		if resp.StatusCode != http.StatusBadRequest || time.Now().After(deadline) {
			t.Fatalf("large body beside a stalled one: %d %s; want 503 (the stalled upload holds the budget)", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond) // the stalled bytes are not all read yet
	}
	wantStatuses(t, push(t, s.base, body(item{"bodies", "P", "small", "s1"})), Q)
	stalled.Close()
	for {
		resp, b := large()
		if resp.StatusCode == http.StatusBadRequest {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("large body after the stalled one left: %d %s; want 400 (received, then refused as JSON)", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
