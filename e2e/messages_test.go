package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/queenmq/queen-go/crypt"
	"github.com/queenmq/queen-go/internal/broker"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// listedMsg is one message of GET /api/v1/messages.
type listedMsg struct {
	ID             string  `json:"id"`
	TransactionID  string  `json:"transactionId"`
	PartitionID    string  `json:"partitionId"`
	Queue          string  `json:"queue"`
	Partition      string  `json:"partition"`
	Namespace      string  `json:"namespace"`
	Task           string  `json:"task"`
	Offset         int64   `json:"offset"`
	Status         string  `json:"status"`
	TraceID        *string `json:"traceId"`
	ProducerSub    *string `json:"producerSub"`
	CreatedAt      string  `json:"createdAt"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

type modeResp struct {
	HasQueueMode   bool   `json:"hasQueueMode"`
	BusGroupsCount int    `json:"busGroupsCount"`
	Type           string `json:"type"`
}

type messagesResp struct {
	Messages      []listedMsg `json:"messages"`
	Mode          modeResp    `json:"mode"`
	ConsumerGroup string      `json:"consumerGroup"`
	Pagination    struct {
		Limit  int `json:"limit"`
		Offset int `json:"offset"`
	} `json:"pagination"`
}

// listMessages GETs /api/v1/messages?query and requires 200.
func listMessages(t testing.TB, base, query string) messagesResp {
	t.Helper()
	var r messagesResp
	if code := getJSON(t, base+"/api/v1/messages?"+query, &r); code != http.StatusOK {
		c, b := get(t, base+"/api/v1/messages?"+query)
		t.Fatalf("list %s: %d %s", query, c, b)
	}
	return r
}

// listed renders a list as "txid:status" items, in order.
func listed(ms []listedMsg) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.TransactionID + ":" + m.Status
	}
	return strings.Join(out, " ")
}

func listedTx(ms []listedMsg) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.TransactionID
	}
	return strings.Join(out, " ")
}

type groupView struct {
	Name           string  `json:"name"`
	Status         string  `json:"status"`
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

type messageDetail struct {
	listedMsg
	Payload        json.RawMessage `json:"payload"`
	IsEncrypted    bool            `json:"isEncrypted"`
	ErrorMessage   *string         `json:"errorMessage"`
	RetryCount     *int            `json:"retryCount"`
	FailedAt       *string         `json:"failedAt"`
	QueueConfig    pg.QueueOptions `json:"queueConfig"`
	Mode           modeResp        `json:"mode"`
	ConsumerGroups []groupView     `json:"consumerGroups"`
}

// getMessage GETs one message and returns the status, the raw body and,
// on 200, the decoded detail.
func getMessage(t testing.TB, base, pid, txid string) (int, []byte, messageDetail) {
	t.Helper()
	code, b := do(t, http.MethodGet, base+"/api/v1/messages/"+pid+"/"+url.PathEscape(txid), "", nil)
	var d messageDetail
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("detail %s: %v", b, err)
		}
	}
	return code, b, d
}

// pushEach pushes one message per push (so one segment each), transaction
// ids given, payload {"n":i}.
func pushEach(t testing.TB, base, queue, partition string, txids ...string) {
	t.Helper()
	for i, id := range txids {
		wantStatuses(t, push(t, base, body(item{queue, partition, map[string]int{"n": i}, id})), Q)
	}
}

// seedOldMessage stores one message accepted age ago directly as a segment
// committed then (as if the broker had stored it that long ago) at the end
// of queue/partition, which must exist and take no pushes meanwhile.
func seedOldMessage(t testing.TB, s *bundle, queue, partition, txid string, age time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := s.store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var pid uuid.UUID
	var next int64
	if err := tx.QueryRow(ctx, `SELECT p.id, p.next_offset FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 FOR UPDATE OF p`, queue, partition).Scan(&pid, &next); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-age)
	seg := pg.EncodeSegment(nil, []pg.Message{{ID: uuid.Must(uuid.NewV7()), TransactionID: txid,
		CreatedAtMicros: at.UnixMicro(), Payload: []byte(`{"old":true}`)}})
	if _, err := tx.Exec(ctx, `INSERT INTO queen.segments (partition_id, base_offset, last_offset, created_at, body)
		VALUES ($1, $2, $2, $3, $4)`, pid, next, at, seg); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE queen.partitions SET next_offset = $2 WHERE id = $1`, pid, next+1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMessagesStatusQueueModeAndGroup: one partition driven through every
// status in queue mode (autoAck → completed, a dlq ack → dead_letter, a
// live lease → processing, the rest pending) and, independently, in a
// named group; the status filter selects each; mode is hybrid.
func TestMessagesStatusQueueModeAndGroup(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "st", "P", 1, 6) // one push: equal createdAt, so newest first is offset descending
	if code, r := pop(t, s.base, popPath("st", "P"), "batch=2&autoAck=true"); code != http.StatusOK || len(r.Messages) != 2 {
		t.Fatalf("autoAck pop: %d", code)
	}
	_, r := pop(t, s.base, popPath("st", "P"), "batch=1")
	if a := ack(t, s.base, r.Messages[0], "dlq", ""); !a.Success || !a.DLQ {
		t.Fatalf("dlq ack: %+v", a)
	}
	if code, r := pop(t, s.base, popPath("st", "P"), "batch=2"); code != http.StatusOK || len(r.Messages) != 2 {
		t.Fatalf("leased pop: %d", code)
	}
	if code, _ := pop(t, s.base, popPath("st", "P"), "consumerGroup=g&batch=1&autoAck=true"); code != http.StatusOK {
		t.Fatalf("group pop: %d", code)
	}
	if code, _ := pop(t, s.base, popPath("st", "P"), "consumerGroup=g&batch=1"); code != http.StatusOK {
		t.Fatalf("group lease: %d", code)
	}

	all := listMessages(t, s.base, "queue=st")
	want := "m-6:pending m-5:processing m-4:processing m-3:dead_letter m-2:completed m-1:completed"
	if got := listed(all.Messages); got != want {
		t.Fatalf("queue mode:\n got %s\nwant %s", got, want)
	}
	if all.ConsumerGroup != pg.QueueModeGroup || all.Mode != (modeResp{true, 1, "hybrid"}) {
		t.Fatalf("consumerGroup %q mode %+v", all.ConsumerGroup, all.Mode)
	}
	for _, m := range all.Messages {
		if (m.Status == "processing") != (m.LeaseExpiresAt != nil) {
			t.Fatalf("%s: leaseExpiresAt %v with status %s", m.TransactionID, m.LeaseExpiresAt, m.Status)
		}
		if m.Queue != "st" || m.Partition != "P" || m.Namespace != "st" || m.Task != "" || m.Offset != int64(m.TransactionID[2]-'1') {
			t.Fatalf("fields: %+v", m)
		}
	}
	g := listMessages(t, s.base, "queue=st&consumerGroup=g")
	if got := listed(g.Messages); got != "m-6:pending m-5:pending m-4:pending m-3:pending m-2:processing m-1:completed" {
		t.Fatalf("group g: %s", got)
	}
	if g.ConsumerGroup != "g" {
		t.Fatalf("consumerGroup %q", g.ConsumerGroup)
	}
	// A lapsed lease is not processing.
	configure(t, s.base, "lapse", map[string]any{"leaseTime": 1})
	pushN(t, s.base, "lapse", "P", 1, 1)
	if _, r := pop(t, s.base, popPath("lapse", "P"), "batch=1"); len(r.Messages) != 1 {
		t.Fatal("lapse pop")
	}
	if got := listed(listMessages(t, s.base, "queue=lapse").Messages); got != "m-1:processing" {
		t.Fatalf("leased: %s", got)
	}
	testenv.WaitFor(t, 5*time.Second, "the lapsed lease's message to be pending", func() bool {
		return listed(listMessages(t, s.base, "queue=lapse").Messages) == "m-1:pending"
	})

	for _, c := range []struct{ query, want string }{
		{"status=pending", "m-6"},
		{"status=processing", "m-5 m-4"},
		{"status=dead_letter", "m-3"},
		{"status=completed", "m-2 m-1"},
		{"status=completed&consumerGroup=g", "m-1"},
		{"status=processing&consumerGroup=g", "m-2"},
		{"status=dead_letter&consumerGroup=g", ""},
		{"status=pending&consumerGroup=nobody", "m-6 m-5 m-4 m-3 m-2 m-1"},
	} {
		if got := listedTx(listMessages(t, s.base, "queue=st&"+c.query).Messages); got != c.want {
			t.Errorf("%s: got %q, want %q", c.query, got, c.want)
		}
	}
}

// TestMessagesFiltersPagingAndWindow: queue, partition, ns/task (a pushed
// queue "billing.invoices" is namespace billing, task invoices), paging
// that adds up to the whole list, newest first across partitions and
// queues, from/to on createdAt, and the default one-hour window.
func TestMessagesFiltersPagingAndWindow(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushEach(t, s.base, "billing.invoices", "A", "i1", "i2")
	pushEach(t, s.base, "billing.refunds", "R", "r1")
	pushEach(t, s.base, "billing.invoices", "B", "i3")
	pushEach(t, s.base, "other", "O", "o1")
	pushEach(t, s.base, "billing.invoices", "A", "i4")
	seedOldMessage(t, s, "billing.invoices", "A", "ancient", 3*time.Hour)

	for _, c := range []struct{ query, want string }{
		{"", "i4 o1 i3 r1 i2 i1"},
		{"queue=billing.invoices", "i4 i3 i2 i1"},
		{"queue=billing.invoices&partition=A", "i4 i2 i1"},
		{"partition=A", "i4 i2 i1"},
		{"ns=billing", "i4 i3 r1 i2 i1"},
		{"namespace=billing", "i4 i3 r1 i2 i1"},
		{"ns=billing&task=refunds", "r1"},
		{"task=invoices", "i4 i3 i2 i1"},
		{"queue=nope", ""},
		{"ns=other&task=invoices", ""},
	} {
		if got := listedTx(listMessages(t, s.base, c.query).Messages); got != c.want {
			t.Errorf("%q: got %q, want %q", c.query, got, c.want)
		}
	}
	one := listMessages(t, s.base, "queue=billing.refunds").Messages
	if len(one) != 1 || one[0].Namespace != "billing" || one[0].Task != "refunds" || one[0].ProducerSub != nil || one[0].TraceID != nil {
		t.Fatalf("r1: %+v", one)
	}

	var pages []string
	for off := 0; off < 8; off += 2 {
		p := listMessages(t, s.base, fmt.Sprintf("limit=2&offset=%d", off))
		if p.Pagination.Limit != 2 || p.Pagination.Offset != off || len(p.Messages) > 2 {
			t.Fatalf("page %d: %+v", off, p)
		}
		pages = append(pages, listedTx(p.Messages))
	}
	if got := strings.Join(slices.DeleteFunc(pages, func(s string) bool { return s == "" }), " "); got != "i4 o1 i3 r1 i2 i1" {
		t.Fatalf("pages: %q", got)
	}
	if p := listMessages(t, s.base, "limit=0"); len(p.Messages) != 1 || p.Pagination.Limit != 1 {
		t.Fatalf("limit=0 is clamped to 1: %+v", p)
	}
	// Past the deepest offset served: refused, not the deepest page again
	// (a client paging until an empty page would never stop).
	// The same on the queue's message list of the status routes, and for
	// a number too large for an int, which took the default (page 0).
	for _, u := range []string{"/api/v1/messages?offset=10001", "/api/v1/messages?offset=99999999999999999999",
		"/api/v1/status/queues/other/messages?offset=10001", "/api/v1/status/queues/other/messages?offset=99999999999999999999"} {
		if code, b := get(t, s.base+u); code != http.StatusBadRequest || !strings.Contains(b, "offset is at most 10000") {
			t.Fatalf("%s: %d %s", u, code, b)
		}
	}
	if code, b := get(t, s.base+"/api/v1/status/queues/other/messages?offset=10000"); code != 200 || b != "[]" {
		t.Fatalf("status messages at offset 10000: %d %s", code, b)
	}
	if p := listMessages(t, s.base, "offset=10000"); len(p.Messages) != 0 || p.Pagination.Offset != 10000 {
		t.Fatalf("offset=10000: %+v", p)
	}

	full := listMessages(t, s.base, "").Messages
	at := func(txid string) string {
		for _, m := range full {
			if m.TransactionID == txid {
				return url.QueryEscape(m.CreatedAt)
			}
		}
		t.Fatalf("%s not listed", txid)
		return ""
	}
	for _, c := range []struct{ query, want string }{
		{"from=" + at("i3"), "i4 o1 i3"},
		{"to=" + at("i3"), "i3 r1 i2 i1"},
		{"from=" + at("r1") + "&to=" + at("o1"), "o1 i3 r1"},
		{"from=" + at("i2") + "&to=" + at("i2"), "i2"},
		{"from=" + url.QueryEscape(time.Now().Add(-4*time.Hour).UTC().Format(time.RFC3339)) + "&partition=A", "i4 i2 i1 ancient"},
		// The default window is the hour before to; to = now-2h30m keeps the
		// 3-hour-old message well inside it however long the suite takes.
		{"to=" + url.QueryEscape(time.Now().Add(-150*time.Minute).UTC().Format(time.RFC3339)), "ancient"},
		{"to=" + url.QueryEscape(time.Now().Add(-5*time.Hour).UTC().Format("2006-01-02 15:04:05")), ""},
	} {
		if got := listedTx(listMessages(t, s.base, c.query).Messages); got != c.want {
			t.Errorf("%s: got %q, want %q", c.query, got, c.want)
		}
	}
}

// TestMessagesListDecodesOnlyWhatItNeeds: the list reads segments newest
// first and stops once its page is complete; a status no segment can hold
// (nothing is leased) decodes none.
func TestMessagesListDecodesOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	var old, recent []string
	for i := 1; i <= 12; i++ {
		old = append(old, fmt.Sprintf("old-%d", i))
	}
	for i := 1; i <= 5; i++ {
		recent = append(recent, fmt.Sprintf("new-%d", i))
	}
	pushEach(t, s.base, "bnd", "P", old...)
	time.Sleep(2 * pg.MessageClockSlack) // the old segments are more than the slack older
	pushEach(t, s.base, "bnd", "P", recent...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	l, err := s.store.ListMessages(ctx, pg.MessageFilter{Queue: "bnd", From: now.Add(-time.Hour), To: now, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range l.Messages {
		got = append(got, m.TransactionID)
	}
	if strings.Join(got, " ") != "new-5 new-4 new-3 new-2 new-1" || l.SegmentsDecoded != 5 {
		t.Fatalf("page %v from %d segments, want the 5 newest from 5", got, l.SegmentsDecoded)
	}
	// Nothing is consumed, leased or dead-lettered: no segment can hold
	// such a message, none is read.
	for _, st := range []string{pg.MessageProcessing, pg.MessageCompleted, pg.MessageDeadLetter} {
		l, err := s.store.ListMessages(ctx, pg.MessageFilter{Queue: "bnd", Status: st, From: now.Add(-time.Hour), To: now, Limit: 5})
		if err != nil || len(l.Messages) != 0 || l.SegmentsDecoded != 0 {
			t.Fatalf("%s: %v, %d messages from %d segments", st, err, len(l.Messages), l.SegmentsDecoded)
		}
	}
	// A segment committed before the window is not read; one committed
	// after it (within MessageCommitGrace) is skipped by its first message.
	seedOldMessage(t, s, "bnd", "P", "ancient", 3*time.Hour)
	all, err := s.store.ListMessages(ctx, pg.MessageFilter{Queue: "bnd", From: now.Add(-time.Hour), To: now, Limit: 100})
	if err != nil || len(all.Messages) != 17 || all.SegmentsDecoded != 17 {
		t.Fatalf("window: %v, %d messages from %d segments, want 17 from 17", err, len(all.Messages), all.SegmentsDecoded)
	}
	old12 := time.UnixMicro(all.Messages[5].CreatedAtMicros)
	l, err = s.store.ListMessages(ctx, pg.MessageFilter{Queue: "bnd", From: now.Add(-time.Hour), To: old12, Limit: 100})
	if err != nil || len(l.Messages) != 12 || l.Messages[0].TransactionID != "old-12" || l.SegmentsDecoded != 12 {
		t.Fatalf("to old-12: %v, %d messages from %d segments, want 12 from 12", err, len(l.Messages), l.SegmentsDecoded)
	}
}

// TestMessageDetail: the payload comes back byte for byte; status,
// consumer groups, dead-letter fields, queueConfig and traceId follow the
// message through a named group's lease and a queue-mode dlq ack; a
// message past its dedup sidecar is found while leased; a deleted segment
// is 404.
func TestMessageDetail(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "det", map[string]any{"leaseTime": 120, "retryLimit": 7, "dedupWindowSeconds": 600})
	payload := `{"z":1.50,  "a":[true,null],"s":"\u00e9"}`
	res := push(t, s.base, []byte(`{"items":[{"queue":"det","partition":"P","transactionId":"x/1","payload":`+payload+`}]}`))
	wantStatuses(t, res, Q)
	trace := "0190c1d2-0000-7000-8000-0000000000aa"
	if code, r := txCall(t, s.base, map[string]any{"type": "push", "items": []map[string]any{{"queue": "det",
		"partition": "P", "payload": 2, "traceId": trace, "transactionId": "traced"}}}); code != 200 || r["success"] != true {
		t.Fatalf("transaction push: %d %v", code, r)
	}
	pid := listMessages(t, s.base, "queue=det").Messages[0].PartitionID

	code, raw, d := getMessage(t, s.base, pid, "x/1")
	if code != http.StatusOK {
		t.Fatalf("get: %d %s", code, raw)
	}
	if !bytes.HasPrefix(raw, []byte(`{"payload":`+payload+`,`)) {
		t.Fatalf("payload not byte-exact: %s", raw)
	}
	if d.ID != res[0].MessageID || d.TransactionID != "x/1" || d.PartitionID != pid || d.Queue != "det" ||
		d.Partition != "P" || d.Offset != 0 || d.Status != "pending" || d.IsEncrypted || d.ErrorMessage != nil ||
		d.RetryCount != nil || d.FailedAt != nil || d.LeaseExpiresAt != nil || len(d.ConsumerGroups) != 0 ||
		d.Mode != (modeResp{false, 0, "none"}) || d.TraceID != nil || !strings.HasSuffix(d.CreatedAt, "Z") {
		t.Fatalf("fresh message: %s", raw)
	}
	wantCfg := pg.DefaultQueueOptions()
	wantCfg.LeaseTime, wantCfg.RetryLimit, wantCfg.DedupWindowSeconds = 120, 7, 600
	if d.QueueConfig != wantCfg {
		t.Fatalf("queueConfig %+v, want %+v", d.QueueConfig, wantCfg)
	}
	if _, _, dt := getMessage(t, s.base, pid, "traced"); dt.TraceID == nil || *dt.TraceID != trace || string(dt.Payload) != "2" {
		t.Fatalf("traced: %+v", dt)
	}

	_, g := pop(t, s.base, popPath("det", "P"), "consumerGroup=g&batch=1")
	_, qm := pop(t, s.base, popPath("det", "P"), "batch=1")
	if len(g.Messages) != 1 || len(qm.Messages) != 1 {
		t.Fatal("pops")
	}
	b, _ := json.Marshal(map[string]any{"transactionId": "x/1", "partitionId": pid, "leaseId": qm.LeaseID,
		"status": "dlq", "error": "boom"})
	if code, rb := post(t, s.base, "/api/v1/ack", b); code != http.StatusOK || !strings.Contains(string(rb), `"dlq":true`) {
		t.Fatalf("dlq ack: %d %s", code, rb)
	}
	_, raw, d = getMessage(t, s.base, pid, "x/1")
	if d.Status != "dead_letter" || d.ErrorMessage == nil || *d.ErrorMessage != "boom" || d.RetryCount == nil ||
		*d.RetryCount != 0 || d.FailedAt == nil || d.Mode != (modeResp{true, 1, "hybrid"}) {
		t.Fatalf("dead-lettered: %s", raw)
	}
	if len(d.ConsumerGroups) != 2 ||
		d.ConsumerGroups[0].Name != pg.QueueModeGroup || d.ConsumerGroups[0].Status != "dead_letter" || !d.ConsumerGroups[0].Consumed ||
		d.ConsumerGroups[1].Name != "g" || d.ConsumerGroups[1].Status != "processing" || d.ConsumerGroups[1].Consumed ||
		d.ConsumerGroups[1].LeaseExpiresAt == nil {
		t.Fatalf("consumerGroups: %s", raw)
	}

	// Past its sidecar entry (as after the dedup window), the message is
	// found while a consumer holds it, and not otherwise.
	if _, err := s.store.Pool().Exec(context.Background(), `DELETE FROM queen.dedup_batches WHERE $1 = ANY(partition_ids)`, pid); err != nil {
		t.Fatal(err)
	}
	if code, raw, _ := getMessage(t, s.base, pid, "traced"); code != http.StatusNotFound || string(raw) != `{"error":"Message not found"}` {
		t.Fatalf("unleased, no sidecar: %d %s", code, raw)
	}
	if _, r := pop(t, s.base, popPath("det", "P"), "batch=1"); len(r.Messages) != 1 || r.Messages[0].TransactionID != "traced" {
		t.Fatalf("pop traced: %s", r.raw)
	}
	if code, raw, d := getMessage(t, s.base, pid, "traced"); code != http.StatusOK || d.Status != "processing" || d.LeaseExpiresAt == nil {
		t.Fatalf("leased, no sidecar: %d %s", code, raw)
	}

	// A segment gone (retention) is 404, although the sidecar names it.
	if _, err := s.store.Pool().Exec(context.Background(), `DELETE FROM queen.segments WHERE base_offset = 0`); err != nil {
		t.Fatal(err)
	}
	if code, raw, _ := getMessage(t, s.base, pid, "x/1"); code != http.StatusNotFound {
		t.Fatalf("segment gone: %d %s", code, raw)
	}
}

// TestMessageDetailDecryptsEncryptedQueue: a queue with encryptionEnabled
// stores its payload sealed; the detail returns it opened, byte for byte,
// and says it is stored encrypted.
func TestMessageDetailDecryptsEncryptedQueue(t *testing.T) {
	t.Parallel()
	key, err := crypt.ParseKey(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	s := setup(t, func(c *broker.Config) { c.EncryptionKey = key })
	configure(t, s.base, "encm", map[string]any{"encryptionEnabled": true})
	secret := `{"card":"4111-SECRET",  "amount":10.50}`
	wantStatuses(t, push(t, s.base, []byte(`{"items":[{"queue":"encm","partition":"P","transactionId":"e1","payload":`+secret+`}]}`)), Q)
	var stored []byte
	if err := s.store.Pool().QueryRow(context.Background(), `SELECT body FROM queen.segments`).Scan(&stored); err != nil ||
		bytes.Contains(stored, []byte("SECRET")) {
		t.Fatalf("stored in plaintext: %v", err)
	}
	l := listMessages(t, s.base, "queue=encm").Messages
	if len(l) != 1 || l[0].TransactionID != "e1" {
		t.Fatalf("list: %+v", l)
	}
	code, raw, d := getMessage(t, s.base, l[0].PartitionID, "e1")
	if code != http.StatusOK || !bytes.HasPrefix(raw, []byte(`{"payload":`+secret+`,`)) || !d.IsEncrypted || !d.QueueConfig.EncryptionEnabled {
		t.Fatalf("detail: %d %s", code, raw)
	}
}

// TestMessagesBadRequests: malformed filters and addresses are 400, an
// unknown message 404 (DELETE of a message: TestMessageDelete).
func TestMessagesBadRequests(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushEach(t, s.base, "bad", "P", "b1")
	pid := listMessages(t, s.base, "queue=bad").Messages[0].PartitionID
	for _, c := range []struct {
		path string
		code int
	}{
		{"/api/v1/messages?status=failed", 400},
		{"/api/v1/messages?status=PENDING", 400},
		{"/api/v1/messages?from=yesterday", 400},
		{"/api/v1/messages?to=2025-13-01", 400},
		{"/api/v1/messages?from=2025-01-02&to=2025-01-01", 400},
		{"/api/v1/messages?queue=%01", 400},
		{"/api/v1/messages?partition=%7F", 400},
		{"/api/v1/messages?ns=a%00b", 400},
		{"/api/v1/messages?task=%0A", 400},
		{"/api/v1/messages?consumerGroup=" + strings.Repeat("g", 256), 400},
		{"/api/v1/messages?limit=abc&offset=-4", 200},
		{"/api/v1/messages/not-a-uuid/b1", 400},
		{"/api/v1/messages/" + pid + "/" + strings.Repeat("t", 2000), 400},
		{"/api/v1/messages/" + pid + "/nope", 404},
		{"/api/v1/messages/" + uuid.NewString() + "/b1", 404},
		{"/api/v1/messages/" + pid + "/b1", 200},
	} {
		code, b := get(t, s.base+c.path)
		if code != c.code || (code != 200 && !strings.HasPrefix(b, `{"error":`)) {
			t.Errorf("GET %s: %d %s, want %d", c.path, code, b, c.code)
		}
		if code == 404 && b != `{"error":"Message not found"}` {
			t.Errorf("GET %s: 404 body %s", c.path, b)
		}
	}
	if code, b := del(t, s.base+"/api/v1/messages/not-a-uuid/b1"); code != http.StatusBadRequest {
		t.Errorf("DELETE with a bad partitionId: %d %s", code, b)
	}
}
