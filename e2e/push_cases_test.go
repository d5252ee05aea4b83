package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/ingest"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// setup is the common bundle: a fresh database, a broker on it, and a
// store to read back what was stored.
type bundle struct {
	url   string
	b     *broker.Broker
	base  string
	store *pg.Store
}

func setup(t *testing.T, mod func(*broker.Config)) *bundle {
	t.Helper()
	url := testenv.NewDatabase(t)
	b := testenv.StartBroker(t, url, "", mod)
	return &bundle{url: url, b: b, base: "http://" + b.Addr(), store: openStore(t, url)}
}

const (
	Q = ingest.StatusQueued
	D = ingest.StatusDuplicate
	B = ingest.StatusBuffered
	F = ingest.StatusFailed
)

func TestCaseP01DedupIsPerPartition(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	req := body(item{"q1", "A", 1, "T"}, item{"q1", "B", 2, "T"}, item{"q2", "A", 3, "T"})
	first := push(t, s.base, req)
	wantStatuses(t, first, Q, Q, Q)
	if first[0].MessageID == first[1].MessageID || first[1].MessageID == first[2].MessageID || first[0].MessageID == first[2].MessageID {
		t.Fatalf("message ids not distinct: %+v", first)
	}
	second := push(t, s.base, req)
	wantStatuses(t, second, D, D, D)
	for i := range second {
		if second[i].MessageID != first[i].MessageID {
			t.Errorf("item %d: duplicate names %s, want its own partition's original %s", i, second[i].MessageID, first[i].MessageID)
		}
	}
	for _, qp := range [][2]string{{"q1", "A"}, {"q1", "B"}, {"q2", "A"}} {
		if n := len(readPartition(t, s.store, qp[0], qp[1])); n != 1 {
			t.Errorf("%s/%s holds %d messages, want 1", qp[0], qp[1], n)
		}
	}
}

func TestCaseP02RepeatedIDInBody(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	res := push(t, s.base, body(item{"qe", "P", "first", "X"}, item{"qe", "P", "other", "Y"}, item{"qe", "P", "second", "X"}))
	wantStatuses(t, res, Q, Q, D)
	if res[2].MessageID != res[0].MessageID {
		t.Fatalf("duplicate names %s, want the first item's %s", res[2].MessageID, res[0].MessageID)
	}
	msgs := readPartition(t, s.store, "qe", "P")
	if len(msgs) != 2 || string(msgs[0].Payload) != `"first"` || msgs[0].TransactionID != "X" {
		t.Fatalf("stored %+v", msgs)
	}
}

func TestCaseP03StoredKeyDoesNotSinkBatch(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	wantStatuses(t, push(t, s.base, body(item{"ql", "P", 2, "T2"})), Q)
	wantStatuses(t, push(t, s.base, body(item{"ql", "P", 1, "T1"}, item{"ql", "P", 2, "T2"}, item{"ql", "P", 3, "T3"})), Q, D, Q)
	msgs := readPartition(t, s.store, "ql", "P")
	if got := fmt.Sprint(txids(msgs)); got != "[T2 T1 T3]" {
		t.Fatalf("partition holds %s, want [T2 T1 T3]", got)
	}
	for i, m := range msgs {
		if m.Offset != int64(i) {
			t.Fatalf("offsets: %d at position %d", m.Offset, i)
		}
	}
}

func TestCaseP04WindowIsFixed(t *testing.T) {
	t.Parallel()
	// The broker's acceptance clock is driven by the test, so the times of
	// the case are exact (no sleeping, no scheduling jitter).
	var mu sync.Mutex
	now := time.Now()
	s := setup(t, func(c *broker.Config) {
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	configure(t, s.base, "qw", map[string]any{"dedupWindowSeconds": 4})
	configure(t, s.base, "qw0", map[string]any{"dedupWindowSeconds": 0})
	start := now
	var got, got0 []ingest.Status
	for _, at := range []time.Duration{0, 2 * time.Second, 3900 * time.Millisecond, 4500 * time.Millisecond, 6 * time.Second} {
		mu.Lock()
		now = start.Add(at)
		mu.Unlock()
		got = append(got, push(t, s.base, body(item{"qw", "P", 1, "T"}))[0].Status)
		got0 = append(got0, push(t, s.base, body(item{"qw0", "P", 1, "T"}))[0].Status)
	}
	if fmt.Sprint(got) != fmt.Sprint([]ingest.Status{Q, D, D, Q, D}) {
		t.Errorf("window 4 s: %v, want [queued duplicate duplicate queued duplicate]", got)
	}
	if fmt.Sprint(got0) != fmt.Sprint([]ingest.Status{Q, Q, Q, Q, Q}) {
		t.Errorf("window 0: %v, want all queued", got0)
	}
}

func TestCaseP05OnlyExactKeyDeduplicates(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	raw := []byte(`{"items":[
		{"queue":"qj","partition":"P","transactionID":"T1","payload":1},
		{"queue":"qj","partition":"P","TransactionId":"T1","payload":2},
		{"queue":"qj","partition":"P","payload":{"transactionId":"T1"}},
		{"queue":"qj","partition":"P","transactionId":"T1","payload":4}]}`)
	wantStatuses(t, push(t, s.base, raw), Q, Q, Q, Q)
	wantStatuses(t, push(t, s.base, raw), Q, Q, Q, D)
	if n := len(readPartition(t, s.store, "qj", "P")); n != 7 {
		t.Fatalf("partition holds %d, want 7", n)
	}
}

// TestCaseP07BodyLimit413 is not parallel: it measures the heap.
func TestCaseP07BodyLimit413(t *testing.T) {
	const limit = 1 << 20
	s := setup(t, func(c *broker.Config) { c.MaxBodyBytes = limit })
	over := make([]byte, limit+1)
	for i := range over {
		over[i] = ' '
	}
	copy(over, `{"items":[{"queue":"big","payload":"`)
	client := &http.Client{Timeout: 30 * time.Second}
	send := func(mode string) (int, []byte) {
		var rd interface{ Read([]byte) (int, error) } = bytes.NewReader(over)
		if mode == "chunked" {
			rd = struct{ *bytes.Reader }{bytes.NewReader(over)} // hides Len: Go sends chunked
		}
		req, err := http.NewRequest(http.MethodPost, s.base+"/api/v1/push", rd)
		if err != nil {
			t.Fatal(err)
		}
		if mode == "expect" {
			req.Header.Set("Expect", "100-continue")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	send("length") // warm pools
	before := heap()
	for i := 0; i < 100; i++ {
		for _, mode := range []string{"length", "chunked", "expect"} {
			code, rb := send(mode)
			var e struct{ Error string }
			if code != http.StatusRequestEntityTooLarge || json.Unmarshal(rb, &e) != nil || e.Error == "" {
				t.Fatalf("attempt %d %s: %d %s", i, mode, code, rb)
			}
		}
	}
	if after := heap(); after > before+32<<20 {
		t.Errorf("heap grew from %d to %d bytes over 300 rejected bodies", before, after)
	} else {
		t.Logf("heap in use %d → %d bytes over 300 rejected bodies", before, after)
	}
	// A body of exactly the limit is accepted.
	exact := []byte(`{"items":[{"queue":"big","payload":"`)
	pad := limit - len(exact) - len(`"}]}`)
	exact = append(exact, bytes.Repeat([]byte("x"), pad)...)
	exact = append(exact, `"}]}`...)
	if len(exact) != limit {
		t.Fatalf("built %d bytes", len(exact))
	}
	wantStatuses(t, push(t, s.base, exact), Q)
	if n := len(readQueue(t, s.store, "big")); n != 1 {
		t.Fatalf("stored %d, want only the exact-limit push", n)
	}
}

func TestCaseP08PayloadsKeptByteForByte(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	payloads := []string{`{"s":"a\u0000b"}`, `{"s":"\ud800"}`, `{"b":1,  "a":2}`, `{"a":1,"a":2}`, `1.000`,
		`"é😀"`, `null`, `[1,{"a":null}]`, `-0.0`}
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i, p := range payloads {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"queue":"qp","partition":"P","payload":%s}`, p)
	}
	sb.WriteString(`]}`)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wantStatuses(t, push(t, s.base, body(item{"qp", "other", map[string]string{"s": "ok"}, ""})), Q)
	}()
	res := push(t, s.base, []byte(sb.String()))
	wg.Wait()
	for i, r := range res {
		if r.Status != Q {
			t.Fatalf("item %d (%s): %s", i, payloads[i], r.Status)
		}
	}
	msgs := readPartition(t, s.store, "qp", "P")
	if len(msgs) != len(payloads) {
		t.Fatalf("stored %d", len(msgs))
	}
	for i, m := range msgs {
		if string(m.Payload) != payloads[i] {
			t.Errorf("payload %d: stored %q, pushed %q", i, m.Payload, payloads[i])
		}
	}
}

func TestCaseP09ShapeErrorsRejectWholeRequest(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	bad := []string{`{}`, `{"items":null}`, `{"items":{}}`, `{"items":"x"}`,
		`{"items":[{"queue":"r7","payload":1},5]}`,
		`{"items":[{"queue":"r7","payload":1},{"payload":1}]}`,
		`{"items":[{"queue":"r7"}]}`,
		`{"items":[{"queue":"","payload":1}]}`,
		`{"items":[{"queue":"r7","partition":5,"payload":1}]}`,
		`{"items":[{"queue":"r7","partition":"","payload":1}]}`,
		`{"items":[{"queue":"r7","transactionId":12,"payload":1}]}`,
		`{"items":[{"queue":5,"payload":1}]}`,
		`{"items":[{"queue":"r7","partition":null,"payload":1}]}`,
		`{"items":[{"queue":"a\u0001b","payload":1}]}`,
	}
	for _, b := range bad {
		code, rb := post(t, s.base, "/api/v1/push", []byte(b))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want 400 with an error", b, code, rb)
		}
	}
	if n := len(readQueue(t, s.store, "r7")); n != 0 {
		t.Fatalf("stored %d messages from rejected requests", n)
	}
	code, rb := post(t, s.base, "/api/v1/push", []byte(`{"items":[]}`))
	if code != http.StatusCreated || string(rb) != "[]" {
		t.Fatalf("empty items: %d %s", code, rb)
	}
}

func TestCaseP10MalformedJSON(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	bad := [][]byte{{}, []byte(`{"items":[`), []byte(`{"items":[]}garbage`), []byte(`{'items':[]}`),
		[]byte(`{"items":[{"queue":"r6",}]}`), []byte("\"\xff\""), []byte(`null`),
		bytes.Repeat([]byte("["), 100000), []byte(`[]`), []byte(`{"items":[{"queue":"r6","payload":1}]`)}
	for _, b := range bad {
		start := time.Now()
		code, rb := post(t, s.base, "/api/v1/push", b)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || e.Error == "" {
			t.Errorf("%.40q: %d %s, want 400 with an error", b, code, rb)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%.40q took %v", b, d)
		}
	}
	wantStatuses(t, push(t, s.base, body(item{"r6", "", 1, ""})), Q)
}

func TestCaseP11NamesAndIDsAreByteExact(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	res := push(t, s.base, body(item{"qn", "Default", 1, "T"}, item{"qn", "default", 2, "T"}, item{"qn", " Default ", 3, "T"}))
	wantStatuses(t, res, Q, Q, Q)
	res = push(t, s.base, body(item{"qn", "K", 1, "abc"}, item{"qn", "K", 2, "ABC"},
		item{"qn", "K", 3, "\u00e9"}, item{"qn", "K", 4, "e\u0301"}, item{"qn", "K", 5, "T"}, item{"qn", "K", 6, " T"}))
	wantStatuses(t, res, Q, Q, Q, Q, Q, Q)
	res = push(t, s.base, []byte(`{"items":[{"queue":"qn","partition":"E","transactionId":"","payload":1},{"queue":"qn","partition":"E","transactionId":"","payload":2}]}`))
	wantStatuses(t, res, Q, Q)
	if res[0].TransactionID != res[0].MessageID || res[1].TransactionID != res[1].MessageID {
		t.Fatalf("empty transactionId must become the minted id: %+v", res)
	}
	long := strings.Repeat("x", 2048)
	code, _ := post(t, s.base, "/api/v1/push", body(item{"qn", "L", 1, long}))
	if code != http.StatusBadRequest {
		t.Fatalf("2 KiB transactionId: %d, want 400", code)
	}
	if n := len(readQueue(t, s.store, "qn")); n != 11 {
		t.Fatalf("queue holds %d, want 11", n)
	}
}

func TestCaseP12BufferedIDs(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	first := push(t, s.base, body(item{"r11", "P", "old", "T1"}))
	wantStatuses(t, first, Q)
	setMaintenance(t, s.base, true)
	res := push(t, s.base, body(item{"r11", "P", "a", "T1"}, item{"r11", "P", "b", "T2"}, item{"r11", "P", "c", ""}))
	wantStatuses(t, res, B, B, B)
	if res[2].TransactionID != res[2].MessageID || res[0].TransactionID != "T1" || res[1].TransactionID != "T2" {
		t.Fatalf("buffered verdicts must carry the ids they will be stored under: %+v", res)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(readPartition(t, s.store, "r11", "P")); n != 1 {
		t.Fatalf("during maintenance the partition holds %d, want 1", n)
	}
	setMaintenance(t, s.base, false)
	testenv.WaitFor(t, 10*time.Second, "drain", func() bool { return len(readPartition(t, s.store, "r11", "P")) == 3 })
	msgs := readPartition(t, s.store, "r11", "P")
	if got := fmt.Sprint(txids(msgs)); got != fmt.Sprintf("[T1 T2 %s]", res[2].TransactionID) {
		t.Fatalf("partition holds %s", got)
	}
	if msgs[1].ID.String() != res[1].MessageID || msgs[2].ID.String() != res[2].MessageID || msgs[0].ID.String() != first[0].MessageID {
		t.Fatalf("stored ids differ from the verdicts")
	}
}

func TestConfigureIsFullReplace(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "qc", map[string]any{"dedupWindowSeconds": 0, "leaseTime": 10})
	wantStatuses(t, push(t, s.base, body(item{"qc", "P", 1, "T"}, item{"qc", "P", 2, "T"})), Q, Q)
	// Omitting dedupWindowSeconds resets it to 3600 (docs/push.md, "Dedup").
	b, _ := json.Marshal(map[string]any{"queue": "qc", "options": map[string]any{"leaseTime": 10}})
	code, rb := post(t, s.base, "/api/v1/configure", b)
	var resp struct {
		Configured bool           `json:"configured"`
		Options    map[string]any `json:"options"`
	}
	if code != 200 || json.Unmarshal(rb, &resp) != nil || !resp.Configured || resp.Options["dedupWindowSeconds"] != float64(3600) || resp.Options["retryLimit"] != float64(3) {
		t.Fatalf("configure: %d %s", code, rb)
	}
	wantStatuses(t, push(t, s.base, body(item{"qc", "P", 3, "T"})), D)
	// null means "the default" (Queen's Go SDK sends it so), never 0.
	code, rb = post(t, s.base, "/api/v1/configure", []byte(`{"queue":"qc","options":{"dedupWindowSeconds":null,"retryLimit":null,"leaseTime":null,"retentionEnabled":null}}`))
	resp.Options = nil
	if code != 200 || json.Unmarshal(rb, &resp) != nil || resp.Options["dedupWindowSeconds"] != float64(3600) ||
		resp.Options["retryLimit"] != float64(3) || resp.Options["leaseTime"] != float64(300) || resp.Options["retentionEnabled"] != false {
		t.Fatalf("configure with null options: %d %s", code, rb)
	}
	wantStatuses(t, push(t, s.base, body(item{"qc", "P", 4, "T"})), D)
	for _, bad := range []string{`{}`, `{"queue":""}`, `{"queue":"x","options":{"leaseTime":-1}}`, `{"queue":"x","options":{"retentionEnabled":"yes"}}`, `[`} {
		if code, rb := post(t, s.base, "/api/v1/configure", []byte(bad)); code != 400 {
			t.Errorf("configure %s: %d %s, want 400", bad, code, rb)
		}
	}
}

func TestOrderingConcurrentPushesOnePartition(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	const producers, pushes, per = 8, 40, 5
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < pushes; i++ {
				var items []item
				for k := 0; k < per; k++ {
					items = append(items, item{"qo", "P", map[string]int{"p": p, "n": i*per + k}, fmt.Sprintf("%d-%d", p, i*per+k)})
				}
				for _, r := range push(t, s.base, body(items...)) {
					if r.Status != Q {
						t.Errorf("status %s", r.Status)
					}
				}
			}
		}(p)
	}
	wg.Wait()
	msgs := readPartition(t, s.store, "qo", "P")
	if len(msgs) != producers*pushes*per {
		t.Fatalf("stored %d", len(msgs))
	}
	last := map[int]int{}
	for i, m := range msgs {
		if m.Offset != int64(i) {
			t.Fatalf("offset %d at %d", m.Offset, i)
		}
		var v struct{ P, N int }
		if err := json.Unmarshal(m.Payload, &v); err != nil {
			t.Fatal(err)
		}
		if n, ok := last[v.P]; ok && v.N != n+1 {
			t.Fatalf("producer %d: %d after %d", v.P, v.N, n)
		}
		last[v.P] = v.N
	}
}
