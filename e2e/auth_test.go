package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/queen-go/auth"
	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
)

const (
	testSecret   = "e2e-secret-0123456789abcdef0123456789abcdef"
	testIssuer   = "queen-e2e"
	testAudience = "queen-broker"
)

func authSetup(t *testing.T, mod func(*broker.Config)) *bundle {
	t.Helper()
	return setup(t, func(c *broker.Config) {
		c.Auth = auth.Config{Enabled: true, Algorithm: auth.AlgHS256, Secret: testSecret, Issuer: testIssuer,
			Audience: testAudience, ClockSkew: time.Second, SkipPaths: auth.ParseSkipPaths("/health,/metrics")}
		if mod != nil {
			mod(c)
		}
	})
}

// token signs an HS256 token; variant breaks it on purpose.
func token(t testing.TB, sub string, roles []string, variant string) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": sub, "roles": roles, "iss": testIssuer, "aud": testAudience,
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	secret := []byte(testSecret)
	header := map[string]any{}
	switch variant {
	case "expired":
		claims["exp"] = time.Now().Add(-time.Hour).Unix()
	case "no-exp":
		delete(claims, "exp")
	case "issued-in-future":
		claims["iat"] = time.Now().Add(time.Hour).Unix()
	case "crit":
		header["crit"] = []string{"exp"}
	case "wrong-signature":
		secret = []byte("another-secret-another-secret-another")
	case "wrong-issuer":
		claims["iss"] = "someone-else"
	case "wrong-audience":
		claims["aud"] = "another-service"
	case "alg-none":
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// do sends a request with an optional bearer token (tok "" = none) and
// body, and returns the status and response body.
func do(t testing.TB, method, u, tok string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := testenv.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAuthMatrix: every route × every role × every token state.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	s := authSetup(t, nil)
	const lease = "0190c1d2-0000-7000-8000-000000000001"
	type route struct {
		method, path, body string
		need               auth.Capability
	}
	rw := auth.Read | auth.Write
	routes := []route{
		{"POST", "/api/v1/push", `{"items":[]}`, auth.Write},
		{"GET", "/api/v1/pop/queue/mq", "", rw},
		{"GET", "/api/v1/pop/queue/mq/partition/p", "", rw},
		{"GET", "/api/v1/pop?namespace=ns", "", rw},
		{"GET", "/api/v1/status", "", auth.Read},
		{"GET", "/api/v1/status/queues", "", auth.Read},
		{"GET", "/api/v1/status/queues/mq", "", auth.Read},
		{"GET", "/api/v1/status/queues/mq/messages", "", auth.Read},
		{"GET", "/api/v1/status/buffers", "", auth.Read},
		{"GET", "/api/v1/status/analytics", "", auth.Read},
		{"GET", "/api/v1/analytics/system-metrics", "", auth.Read},
		{"GET", "/api/v1/analytics/postgres-stats", "", auth.Read},
		{"GET", "/api/v1/analytics/retention", "", auth.Read},
		{"GET", "/api/v1/analytics/worker-metrics", "", auth.Read},
		{"GET", "/api/v1/analytics/queue-ops", "", auth.Read},
		{"GET", "/api/v1/analytics/queue-lag", "", auth.Read},
		{"POST", "/api/v1/ack", `{}`, rw},
		{"POST", "/api/v1/ack/batch", `{}`, rw},
		{"POST", "/api/v1/lease/" + lease + "/extend", `{}`, rw},
		{"POST", "/api/v1/transaction", `{}`, rw},
		{"POST", "/api/v1/configure", `{"queue":"mq"}`, rw},
		{"POST", "/api/v1/consumer-groups/g/queues/mq/seek", `{"toEnd":true}`, rw},
		{"POST", "/api/v1/consumer-groups/g/queues/mq/partitions/p/seek", `{}`, rw},
		{"GET", "/api/v1/resources/queues", "", auth.Read},
		{"GET", "/api/v1/resources/queues/mq", "", auth.Read},
		{"GET", "/api/v1/consumer-groups", "", auth.Read},
		{"GET", "/api/v1/consumer-groups/g", "", auth.Read},
		{"GET", "/api/v1/dlq", "", auth.Read},
		{"GET", "/api/v1/consumer-groups/lagging", "", auth.Read},
		{"GET", "/api/v1/resources/queues/mq/depth", "", auth.Read},
		{"GET", "/api/v1/resources/overview", "", auth.Read},
		{"GET", "/api/v1/resources/namespaces", "", auth.Read},
		{"GET", "/api/v1/resources/tasks", "", auth.Read},
		{"GET", "/api/v1/resources/partitions", "", auth.Read},
		{"POST", "/api/v1/stats/refresh", `{}`, auth.Admin},
		{"GET", "/api/v1/messages", "", auth.Read},
		{"GET", "/api/v1/messages/" + lease + "/t1", "", auth.Read},
		{"POST", "/api/v1/traces", `{}`, rw},
		{"GET", "/api/v1/traces/names", "", auth.Read},
		{"GET", "/api/v1/traces/by-name/n", "", auth.Read},
		{"GET", "/api/v1/traces/" + lease + "/t1", "", auth.Read},
		{"POST", "/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"2025-01-01T00:00:00Z"}`, rw},
		{"DELETE", "/api/v1/resources/queues/nothere", "", auth.Admin},
		{"DELETE", "/api/v1/consumer-groups/nobody", "", auth.Admin},
		{"DELETE", "/api/v1/consumer-groups/nobody/queues/mq", "", auth.Admin},
		{"GET", "/api/v1/system/maintenance", "", auth.Admin},
		{"POST", "/api/v1/system/maintenance", `{"enabled":false}`, auth.Admin},
		{"GET", "/api/v1/system/maintenance/pop", "", auth.Admin},
		{"POST", "/api/v1/system/maintenance/pop", `{"enabled":false}`, auth.Admin},
	}
	roles := map[string][]string{"write-only": {"write-only"}, "read-only": {"read-only"},
		"read-write": {"read-write"}, "admin": {"admin"}}
	for _, rt := range routes {
		for roleName, rs := range roles {
			for _, variant := range []string{"none", "expired", "wrong-signature", "wrong-issuer", "wrong-audience", "alg-none",
				"no-exp", "issued-in-future", "crit", "valid"} {
				tok := ""
				if variant != "none" {
					tok = token(t, "sub-"+roleName, rs, variant)
				}
				code, b := do(t, rt.method, s.base+rt.path, tok, []byte(rt.body))
				var e struct{ Error string }
				_ = json.Unmarshal(b, &e)
				where := fmt.Sprintf("%s %s as %s (%s)", rt.method, rt.path, roleName, variant)
				switch {
				case variant != "valid":
					if code != http.StatusUnauthorized || e.Error == "" {
						t.Errorf("%s: %d %s, want 401 with an error", where, code, b)
					}
					if tok != "" && (strings.Contains(string(b), tok) || strings.Contains(string(b), testSecret)) {
						t.Errorf("%s: error echoes a secret: %s", where, b)
					}
				case auth.CapsForRoles(rs).Has(rt.need):
					if code == http.StatusUnauthorized || code == http.StatusForbidden || code >= 500 {
						t.Errorf("%s: %d %s, want it let through", where, code, b)
					}
				default:
					if code != http.StatusForbidden || e.Error == "" {
						t.Errorf("%s: %d %s, want 403", where, code, b)
					}
				}
			}
		}
	}
	if code, _ := do(t, "GET", s.base+"/health", "", nil); code != http.StatusOK {
		t.Errorf("/health needs no token: %d", code)
	}
}

// TestProducerSubStamped: producerSub comes from the token's sub only, also
// for an item buffered in the WAL during maintenance and projected later.
func TestProducerSubStamped(t *testing.T) {
	t.Parallel()
	s := authSetup(t, nil)
	writer := token(t, "producer-1", []string{"write-only"}, "valid")
	admin := token(t, "ops", []string{"admin"}, "valid")
	code, b := do(t, "POST", s.base+"/api/v1/push", writer,
		[]byte(`{"items":[{"queue":"ps","partition":"P","payload":1,"producerSub":"forged","transactionId":"a"}]}`))
	if code != 201 {
		t.Fatalf("push: %d %s", code, b)
	}
	do(t, "POST", s.base+"/api/v1/system/maintenance", admin, []byte(`{"enabled":true}`))
	code, b = do(t, "POST", s.base+"/api/v1/push", token(t, "producer-2", []string{"write-only"}, "valid"),
		[]byte(`{"items":[{"queue":"ps","partition":"P","payload":2,"transactionId":"b"}]}`))
	if code != 201 || !strings.Contains(string(b), `"buffered"`) {
		t.Fatalf("push in maintenance: %d %s", code, b)
	}
	do(t, "POST", s.base+"/api/v1/system/maintenance", admin, []byte(`{"enabled":false}`))
	testenv.WaitFor(t, 10*time.Second, "drain", func() bool { return len(readPartition(t, s.store, "ps", "P")) == 2 })
	// A write-only token cannot pop.
	if code, _ := do(t, "GET", s.base+popPath("ps", "P"), writer, nil); code != http.StatusForbidden {
		t.Fatalf("write-only pop: %d", code)
	}
	code, b = do(t, "GET", s.base+popPath("ps", "P")+"?batch=10&autoAck=true", token(t, "reader", []string{"read-write"}, "valid"), nil)
	var r popResp
	if code != 200 || json.Unmarshal(b, &r) != nil || len(r.Messages) != 2 {
		t.Fatalf("pop: %d %s", code, b)
	}
	if r.Messages[0].ProducerSub == nil || *r.Messages[0].ProducerSub != "producer-1" ||
		r.Messages[1].ProducerSub == nil || *r.Messages[1].ProducerSub != "producer-2" {
		t.Fatalf("producerSub: %s", b)
	}
}

// TestEncryptionAtRest: with encryptionEnabled and a key, PostgreSQL holds
// no plaintext payload; pops return it byte-for-byte.
func TestEncryptionAtRest(t *testing.T) {
	t.Parallel()
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, func(c *broker.Config) { c.EncryptionKey = key })
	configure(t, s.base, "enc", map[string]any{"encryptionEnabled": true})
	secret := `{"card":"4111-1111-SECRET-MARKER",  "n":1}`
	res := push(t, s.base, []byte(`{"items":[{"queue":"enc","partition":"P","payload":`+secret+`}]}`))
	wantStatuses(t, res, Q)
	var bodies [][]byte
	rows, err := s.store.Pool().Query(context.Background(), `SELECT s.body FROM queen.segments s
		JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'enc'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	rows.Close()
	if len(bodies) != 1 || bytes.Contains(bodies[0], []byte("SECRET-MARKER")) || !bytes.Contains(bodies[0], []byte(`"authTag"`)) {
		t.Fatalf("stored segment: %q", bodies)
	}
	_, r := pop(t, s.base, popPath("enc", "P"), "autoAck=true")
	if len(r.Messages) != 1 || string(r.Messages[0].Data) != secret {
		t.Fatalf("pop: %s", r.raw)
	}
}

// TestHostileClients: a slowloris client is cut off by the read timeout
// while normal clients keep being served; a connection flood is bounded by
// QUEEN_MAX_CONNS; names cannot escape into SQL or paths.
func TestHostileClients(t *testing.T) {
	t.Parallel()
	s := setup(t, func(c *broker.Config) {
		c.HTTP.ReadTimeout = time.Second
		c.HTTP.MaxConns = 40
	})
	addr := strings.TrimPrefix(s.base, "http://")
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		req := "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"items\":["
		for i := 0; i < len(req); i++ {
			if _, err := slow.Write([]byte{req[i]}); err != nil {
				closed <- time.Since(start)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		buf := make([]byte, 1)
		_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = slow.Read(buf)
		closed <- time.Since(start)
	}()
	for i := 0; i < 10; i++ {
		wantStatuses(t, push(t, s.base, body(item{"hostile", "P", i, ""})), Q)
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case d := <-closed:
		if d > 5*time.Second {
			t.Errorf("slowloris connection lived %v", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("slowloris connection was never cut off")
	}

	// Flood: more idle connections than MaxConns; the excess is refused,
	// and once the flood is gone (or timed out) service is normal.
	var conns []net.Conn
	for i := 0; i < 60; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond)
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	// The answer is JSON as every other (fasthttp's own bound answered
	// plain text); the request may meet the close before it is read.
	if resp, err := fresh.Post(s.base+"/api/v1/push", "application/json",
		bytes.NewReader(body(item{"hostile", "P", "flood", ""}))); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantJSONError(t, "over QUEEN_MAX_CONNS", resp, b, http.StatusServiceUnavailable, "QUEEN_MAX_CONNS")
		if ra := resp.Header.Get("Retry-After"); ra != "1" {
			t.Errorf("over QUEEN_MAX_CONNS: Retry-After %q, want 1", ra)
		}
	}
	// A raw request on a refused connection reads the whole answer.
	raw, br := rawConn(t, s.base)
	if _, err := io.WriteString(raw, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, b := readAnswer(t, br, "raw request over QUEEN_MAX_CONNS")
	wantJSONError(t, "raw request over QUEEN_MAX_CONNS", resp, b, http.StatusServiceUnavailable, "QUEEN_MAX_CONNS")
	raw.Close()
	for _, c := range conns {
		c.Close()
	}
	testenv.WaitFor(t, 10*time.Second, "service after the flood", func() bool {
		code, _ := post(t, s.base, "/api/v1/push", body(item{"hostile", "P", "after", ""}))
		return code == http.StatusCreated
	})

	for _, name := range []string{"'; DROP TABLE queen.queues; --", "../../etc/passwd", "$(touch /tmp/x)"} {
		wantStatuses(t, push(t, s.base, body(item{name, name, 1, name})), Q)
		if n := len(readPartition(t, s.store, name, name)); n != 1 {
			t.Fatalf("%q: %d stored", name, n)
		}
	}
}

// TestMetricsEndpoint: /metrics serves Prometheus text with the push
// verdict counters and the queued pushes' two stage times (each push
// observed in both stages or in neither: a push whose verdict outran the
// WAL writer's report is left out, so at least one of the three), without
// a token (a default skip path).
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	s := authSetup(t, nil)
	for range 3 {
		do(t, "POST", s.base+"/api/v1/push", token(t, "m", []string{"write-only"}, "valid"),
			[]byte(`{"items":[{"queue":"met","payload":1}]}`))
	}
	code, b := do(t, "GET", s.base+"/metrics", "", nil)
	if code != 200 || !strings.Contains(string(b), `queen_push_items_total{status="queued"} 3`) ||
		!strings.Contains(string(b), "queen_wal_fsync_seconds_bucket") {
		t.Fatalf("metrics: %d %.400s", code, b)
	}
	count := func(stage string) int {
		t.Helper()
		re := regexp.MustCompile(`(?m)^queen_push_stage_seconds_count\{stage="` + stage + `"\} (\d+)$`)
		m := re.FindSubmatch(b)
		if m == nil {
			t.Fatalf("no queen_push_stage_seconds_count for %s in %.2000s", stage, b)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	if w, p := count("wal"), count("projection"); w != p || w < 1 || w > 3 {
		t.Fatalf("push stages observed: wal %d, projection %d; want the same count, 1 to 3", w, p)
	}
}
