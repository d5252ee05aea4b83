package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/queenmq/queen-go/fastapi"
)

// These tests pin the consumer-group and DLQ routes the Queen SDKs call
// (docs/api.md, "Consumer groups and dead letters"): group delete with
// deleteMetadata=false, the subscription update, the lagging report and the
// DLQ filters with total.

type groupDeleteResp struct {
	Success           bool    `json:"success"`
	ConsumerGroup     string  `json:"consumerGroup"`
	QueueName         *string `json:"queueName"`
	DeletedPartitions int64   `json:"deletedPartitions"`
	MetadataDeleted   bool    `json:"metadataDeleted"`
}

func delGroup(t *testing.T, u string) groupDeleteResp {
	t.Helper()
	code, b := del(t, u)
	var r groupDeleteResp
	if code != http.StatusOK || json.Unmarshal([]byte(b), &r) != nil || !r.Success {
		t.Fatalf("DELETE %s: %d %s", u, code, b)
	}
	return r
}

func subscriptionRows(t *testing.T, s *bundle, group string) int {
	t.Helper()
	var n int
	if err := s.store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM queen.consumer_groups WHERE consumer_group = $1`, group).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func popIDs(msgs []popMsg) string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.TransactionID
	}
	return strings.Join(ids, ",")
}

// TestGroupDeleteKeepsMetadata: ?deleteMetadata=false deletes the cursors
// but keeps the subscription, so a "new" group restarts at its original
// join time and not from the beginning; the default deletes both, and the
// group then re-subscribes by what its next pop says (all).
func TestGroupDeleteKeepsMetadata(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "dk", "P", 1, 3)
	if code, _ := pop(t, s.base, popPath("dk", "P"), "consumerGroup=keep&subscriptionMode=new"); code != http.StatusNoContent {
		t.Fatalf("new group saw history: %d", code)
	}
	pushN(t, s.base, "dk", "P", 4, 5)
	readAll := func() string {
		t.Helper()
		_, r := pop(t, s.base, popPath("dk", "P"), "consumerGroup=keep&autoAck=true&batch=10")
		return popIDs(r.Messages)
	}
	if got := readAll(); got != "m-4,m-5" {
		t.Fatalf("new group: %s", got)
	}

	r := delGroup(t, s.base+"/api/v1/consumer-groups/keep?deleteMetadata=false")
	if r.DeletedPartitions != 1 || r.MetadataDeleted || r.QueueName != nil {
		t.Fatalf("delete keeping metadata: %+v", r)
	}
	if n := subscriptionRows(t, s, "keep"); n != 1 {
		t.Fatalf("subscription rows after deleteMetadata=false: %d", n)
	}
	if got := readAll(); got != "m-4,m-5" {
		t.Fatalf("after deleteMetadata=false the group restarts by its stored subscription (new): got %s", got)
	}

	// The per-queue form honours it too.
	r = delGroup(t, s.base+"/api/v1/consumer-groups/keep/queues/dk?deleteMetadata=false")
	if r.DeletedPartitions != 1 || r.MetadataDeleted || r.QueueName == nil || *r.QueueName != "dk" {
		t.Fatalf("per-queue delete keeping metadata: %+v", r)
	}
	if got := readAll(); got != "m-4,m-5" {
		t.Fatalf("after the per-queue delete: %s", got)
	}

	// Default (and an explicit true): metadata goes, the group starts over
	// by the mode its next pop sends (none: all).
	r = delGroup(t, s.base+"/api/v1/consumer-groups/keep/queues/dk?deleteMetadata=true")
	if r.DeletedPartitions != 1 || !r.MetadataDeleted {
		t.Fatalf("per-queue delete with metadata: %+v", r)
	}
	if n := subscriptionRows(t, s, "keep"); n != 0 {
		t.Fatalf("subscription rows after deleteMetadata=true: %d", n)
	}
	if got := readAll(); got != "m-1,m-2,m-3,m-4,m-5" {
		t.Fatalf("after deleting the metadata: %s", got)
	}
	r = delGroup(t, s.base+"/api/v1/consumer-groups/keep")
	if r.DeletedPartitions != 1 || !r.MetadataDeleted {
		t.Fatalf("default delete: %+v", r)
	}
	if n := subscriptionRows(t, s, "keep"); n != 0 {
		t.Fatalf("subscription rows after the default delete: %d", n)
	}
	// A group without any metadata (queue mode) reports that none was deleted.
	if _, r := pop(t, s.base, popPath("dk", "P"), "autoAck=true"); len(r.Messages) != 1 {
		t.Fatalf("queue mode pop: %d", len(r.Messages))
	}
	r = delGroup(t, s.base+"/api/v1/consumer-groups/__QUEUE_MODE__")
	if r.DeletedPartitions != 1 || r.MetadataDeleted {
		t.Fatalf("queue mode delete: %+v", r)
	}
}

// TestGroupSubscriptionUpdate: POST .../subscription moves the stored start
// of a group; partitions it already has a cursor on are not moved, those it
// has not popped from yet start at the new time.
func TestGroupSubscriptionUpdate(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "su", "A", 1, 3)
	pushN(t, s.base, "su", "B", 4, 6)
	if code, _ := pop(t, s.base, popPath("su", "A"), "consumerGroup=sub&subscriptionMode=new"); code != http.StatusNoContent {
		t.Fatalf("new group saw history: %d", code)
	}
	update := func(group, body string) (int, map[string]any) {
		t.Helper()
		code, rb := post(t, s.base, "/api/v1/consumer-groups/"+group+"/subscription", []byte(body))
		var m map[string]any
		if err := json.Unmarshal(rb, &m); err != nil {
			t.Fatalf("subscription %s: %d %s", body, code, rb)
		}
		return code, m
	}
	code, m := update("sub", `{"subscriptionTimestamp":"1970-01-01T00:00:00Z"}`)
	if code != 200 || m["success"] != true || m["consumerGroup"] != "sub" || m["newTimestamp"] != "1970-01-01T00:00:00Z" || m["rowsUpdated"] != float64(1) {
		t.Fatalf("update: %d %v", code, m)
	}
	if code, r := pop(t, s.base, popPath("su", "A"), "consumerGroup=sub&autoAck=true&batch=10"); code != http.StatusNoContent {
		t.Fatalf("an existing cursor moved: %d %s", code, popIDs(r.Messages))
	}
	if _, r := pop(t, s.base, popPath("su", "B"), "consumerGroup=sub&autoAck=true&batch=10"); popIDs(r.Messages) != "m-4,m-5,m-6" {
		t.Fatalf("a partition without a cursor starts at the new time: %q", popIDs(r.Messages))
	}
	var groups []struct {
		Name, QueueName, SubscriptionMode string
		SubscriptionTimestamp             *string
	}
	getJSON(t, s.base+"/api/v1/consumer-groups", &groups)
	found := false
	for _, g := range groups {
		if g.Name == "sub" {
			found = g.SubscriptionMode == "new" && g.SubscriptionTimestamp != nil && strings.HasPrefix(*g.SubscriptionTimestamp, "1970-01-01T00:00:00")
		}
	}
	if !found {
		t.Fatalf("listing after the update: %+v", groups)
	}

	// A group subscribed with mode all gets a start time that takes effect
	// (a forward move here: B holds nothing after it).
	if _, r := pop(t, s.base, popPath("su", "A"), "consumerGroup=allg&autoAck=true&batch=10"); len(r.Messages) != 3 {
		t.Fatalf("all group: %d", len(r.Messages))
	}
	if code, m := update("allg", `{"subscriptionTimestamp":"2999-01-01 00:00:00+00"}`); code != 200 || m["rowsUpdated"] != float64(1) || m["newTimestamp"] != "2999-01-01T00:00:00Z" {
		t.Fatalf("update allg: %d %v", code, m)
	}
	if code, r := pop(t, s.base, popPath("su", "B"), "consumerGroup=allg&autoAck=true&batch=10"); code != http.StatusNoContent {
		t.Fatalf("all group after a forward update read %s", popIDs(r.Messages))
	}
	// A group with no metadata: nothing to update, not an error.
	if code, m := update("nobody", `{"subscriptionTimestamp":"2020-01-01"}`); code != 200 || m["rowsUpdated"] != float64(0) {
		t.Fatalf("unknown group: %d %v", code, m)
	}

	for _, bad := range []string{``, `{`, `[]`, `{}`, `{"subscriptionTimestamp":null}`, `{"subscriptionTimestamp":5}`,
		`{"subscriptionTimestamp":"yesterday"}`, `{"subscriptionTimestamp":""}`} {
		code, rb := post(t, s.base, "/api/v1/consumer-groups/sub/subscription", []byte(bad))
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(rb, &e) != nil || e.Error == "" {
			t.Errorf("body %q: %d %s, want 400 with a JSON error", bad, code, rb)
		}
	}
}

type lagRow struct {
	ConsumerGroup  string   `json:"consumer_group"`
	QueueName      string   `json:"queue_name"`
	PartitionName  string   `json:"partition_name"`
	PartitionID    string   `json:"partition_id"`
	WorkerID       *string  `json:"worker_id"`
	OffsetLag      int64    `json:"offset_lag"`
	TimeLagSeconds int64    `json:"time_lag_seconds"`
	LagHours       *float64 `json:"lag_hours"`
	Oldest         *string  `json:"oldest_unconsumed_at"`
}

// TestGroupsLaggingRoute: GET /consumer-groups/lagging is its own route
// (not a group named "lagging"); it reports cursors with a backlog whose
// time lag reaches minLagSeconds (default 3600).
func TestGroupsLaggingRoute(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "lg", "P", 1, 3)
	_, slow := pop(t, s.base, popPath("lg", "P"), "consumerGroup=slow") // leased, never acked
	if len(slow.Messages) != 1 {
		t.Fatalf("slow pop: %d", len(slow.Messages))
	}
	if _, r := pop(t, s.base, popPath("lg", "P"), "consumerGroup=fast&autoAck=true&batch=10"); len(r.Messages) != 3 {
		t.Fatalf("fast pop: %d", len(r.Messages))
	}
	lagging := func(query string) (string, []lagRow) {
		t.Helper()
		code, b := get(t, s.base+"/api/v1/consumer-groups/lagging"+query)
		var rows []lagRow
		if code != 200 || json.Unmarshal([]byte(b), &rows) != nil {
			t.Fatalf("lagging%s: %d %s", query, code, b)
		}
		return b, rows
	}
	for _, q := range []string{"", "?minLagSeconds=3600", "?minLagSeconds=junk"} {
		if b, _ := lagging(q); strings.TrimSpace(b) != "[]" {
			t.Fatalf("lagging%s with nothing an hour old: %s", q, b)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	_, rows := lagging("?minLagSeconds=1")
	if len(rows) != 1 {
		t.Fatalf("lagging rows: %+v", rows)
	}
	r := rows[0]
	if r.ConsumerGroup != "slow" || r.QueueName != "lg" || r.PartitionName != "P" || r.PartitionID != slow.Messages[0].PartitionID ||
		r.OffsetLag != 3 || r.TimeLagSeconds < 1 || r.WorkerID == nil || *r.WorkerID != slow.LeaseID || r.LagHours == nil || r.Oldest == nil {
		t.Fatalf("lagging row: %+v", r)
	}
	if _, rows := lagging("?minLagSeconds=0"); len(rows) != 1 {
		t.Fatalf("a caught-up group is never lagging: %+v", rows)
	}
	// The parameter route still serves groups, including names that start
	// with "lagging".
	if code, b := get(t, s.base+"/api/v1/consumer-groups/laggingx"); code != 200 || strings.TrimSpace(b) != "{}" {
		t.Fatalf("group laggingx: %d %s", code, b)
	}
	var g map[string]struct{ Partitions []map[string]any }
	if getJSON(t, s.base+"/api/v1/consumer-groups/slow", &g); len(g["lg"].Partitions) != 1 {
		t.Fatalf("group slow: %+v", g)
	}
}

// TestGroupsLaggingPages: the lagging route answers one page, the default
// limit's rows when the query names none (140 lagging cursors here: 70
// groups each holding a lease on partitions A and B, over the default of
// 100; unpaged, it answered every row, 17.7 MB for 3,000 groups on 20
// partitions). Pages taken by limit and offset are disjoint and one after
// another are the whole list in its order; a caught-up group is in none.
// A limit or offset that is not an integer in its range is a 400 naming
// it, not a silent default or clamp.
func TestGroupsLaggingPages(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "lgp", "A", 1, 2)
	pushN(t, s.base, "lgp", "B", 1, 2)
	const groups = 70
	for g := range groups {
		for _, p := range []string{"A", "B"} {
			if code, r := pop(t, s.base, popPath("lgp", p), fmt.Sprintf("consumerGroup=g%02d", g)); code != 200 || len(r.Messages) == 0 {
				t.Fatalf("pop g%02d %s: %d", g, p, code)
			}
		}
	}
	for _, p := range []string{"A", "B"} {
		if _, r := pop(t, s.base, popPath("lgp", p), "consumerGroup=done&autoAck=true&batch=10"); len(r.Messages) != 2 {
			t.Fatalf("pop done %s: %d", p, len(r.Messages))
		}
	}
	lagging := func(query string) []string {
		t.Helper()
		code, b := get(t, s.base+"/api/v1/consumer-groups/lagging?minLagSeconds=0"+query)
		var rows []lagRow
		if code != 200 || json.Unmarshal([]byte(b), &rows) != nil {
			t.Fatalf("lagging%s: %d %s", query, code, b)
		}
		keys := make([]string, len(rows))
		for i, r := range rows {
			keys[i] = r.ConsumerGroup + "/" + r.PartitionName
			if r.ConsumerGroup == "done" || r.OffsetLag != 2 {
				t.Fatalf("lagging%s: row %+v", query, r)
			}
		}
		return keys
	}
	all := lagging("&limit=1000")
	if len(all) != 2*groups {
		t.Fatalf("limit=1000: %d rows, want %d", len(all), 2*groups)
	}
	if first := lagging(""); fmt.Sprint(first) != fmt.Sprint(all[:fastapi.DefaultLaggingLimit]) {
		t.Fatalf("no limit: %d rows %v\nwant the first %d of %v", len(first), first, fastapi.DefaultLaggingLimit, all)
	}
	for _, limit := range []int{1, 30, 140} {
		var pages []string
		seen := map[string]bool{}
		for offset := 0; ; offset += limit {
			page := lagging(fmt.Sprintf("&limit=%d&offset=%d", limit, offset))
			for _, k := range page {
				if seen[k] {
					t.Fatalf("limit %d: %s on two pages", limit, k)
				}
				seen[k] = true
			}
			pages = append(pages, page...)
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(pages) != fmt.Sprint(all) {
			t.Fatalf("pages of %d, one after another:\n got %v\nwant %v", limit, pages, all)
		}
	}
	if got := lagging("&limit="); len(got) != fastapi.DefaultLaggingLimit {
		t.Fatalf("empty limit: %d rows, want the default", len(got))
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=-1", "limit=abc", "limit=1.5", "limit=99999999999999999999",
		"offset=-1", "offset=x", "offset=2147483648", "limit=10&offset=-3"} {
		code, b := get(t, s.base+"/api/v1/consumer-groups/lagging?"+q)
		var e struct{ Error string }
		param := q[:strings.IndexByte(q, '=')]
		if strings.Contains(q, "&") {
			param = "offset"
		}
		if code != http.StatusBadRequest || json.Unmarshal([]byte(b), &e) != nil || !strings.HasPrefix(e.Error, param+" must be an integer") {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, b, param)
		}
	}
}

// TestGroupsListPages: GET /api/v1/consumer-groups answers one page, the
// default limit's entries when the query names none (120 entries here: 60
// groups on queues glpa and glpb, over the default of 100; unpaged, it
// computed the lag of every cursor, 3,000 groups on 20 partitions in one
// answer of megabytes). Pages taken by limit and offset are disjoint and
// one after another are the whole list in its order (group, then queue
// name), each entry with its own lag; queue= keeps one queue's entries. A
// limit or offset that is not an integer in its range, or a queue that
// cannot be a name, is a 400 naming it.
func TestGroupsListPages(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	pushN(t, s.base, "glpa", "A", 1, 2)
	pushN(t, s.base, "glpb", "A", 1, 2)
	const groups = 60
	for g := range groups {
		if code, r := pop(t, s.base, popPath("glpa", "A"), fmt.Sprintf("consumerGroup=g%02d", g)); code != 200 || len(r.Messages) != 1 {
			t.Fatalf("pop g%02d glpa: %d", g, code)
		}
		if code, r := pop(t, s.base, popPath("glpb", "A"), fmt.Sprintf("consumerGroup=g%02d&autoAck=true&batch=10", g)); code != 200 || len(r.Messages) != 2 {
			t.Fatalf("pop g%02d glpb: %d", g, code)
		}
	}
	type entry struct {
		Name, QueueName   string
		TotalLag, Members int
		PartitionsWithLag int
		Topics            []string
	}
	list := func(query string) []string {
		t.Helper()
		code, b := get(t, s.base+"/api/v1/consumer-groups?"+query)
		var es []entry
		if code != 200 || json.Unmarshal([]byte(b), &es) != nil {
			t.Fatalf("groups?%s: %d %s", query, code, b)
		}
		keys := make([]string, len(es))
		for i, e := range es {
			keys[i] = e.Name + "/" + e.QueueName
			want := entry{Name: e.Name, QueueName: e.QueueName, Topics: []string{e.QueueName}}
			if e.QueueName == "glpa" {
				want.TotalLag, want.Members, want.PartitionsWithLag = 2, 1, 1
			}
			if fmt.Sprint(e) != fmt.Sprint(want) {
				t.Fatalf("groups?%s: %+v, want %+v", query, e, want)
			}
		}
		return keys
	}
	var want []string
	for g := range groups {
		want = append(want, fmt.Sprintf("g%02d/glpa", g), fmt.Sprintf("g%02d/glpb", g))
	}
	all := list("limit=1000")
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("limit=1000:\n got %v\nwant %v", all, want)
	}
	if first := list(""); fmt.Sprint(first) != fmt.Sprint(all[:fastapi.DefaultGroupsLimit]) {
		t.Fatalf("no limit: %d entries %v\nwant the first %d of %v", len(first), first, fastapi.DefaultGroupsLimit, all)
	}
	for _, limit := range []int{1, 30, 120} {
		var pages []string
		seen := map[string]bool{}
		for offset := 0; ; offset += limit {
			page := list(fmt.Sprintf("limit=%d&offset=%d", limit, offset))
			for _, k := range page {
				if seen[k] {
					t.Fatalf("limit %d: %s on two pages", limit, k)
				}
				seen[k] = true
			}
			pages = append(pages, page...)
			if len(page) < limit {
				break
			}
		}
		if fmt.Sprint(pages) != fmt.Sprint(all) {
			t.Fatalf("pages of %d, one after another:\n got %v\nwant %v", limit, pages, all)
		}
	}
	if got := list("queue=glpb&limit=3&offset=58"); fmt.Sprint(got) != "[g58/glpb g59/glpb]" {
		t.Fatalf("queue=glpb from 58: %v", got)
	}
	if got := list("limit="); len(got) != fastapi.DefaultGroupsLimit {
		t.Fatalf("empty limit: %d entries, want the default", len(got))
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=-1", "limit=abc", "limit=1.5", "limit=99999999999999999999",
		"offset=-1", "offset=x", "offset=2147483648", "limit=10&offset=-3", "queue=%00"} {
		code, b := get(t, s.base+"/api/v1/consumer-groups?"+q)
		var e struct{ Error string }
		param := q[:strings.IndexByte(q, '=')]
		if strings.Contains(q, "&") {
			param = "offset"
		}
		if code != http.StatusBadRequest || json.Unmarshal([]byte(b), &e) != nil || !strings.HasPrefix(e.Error, param+" must be") {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, b, param)
		}
	}
}

type dlqResp struct {
	Messages []struct {
		TransactionID string `json:"transactionId"`
		Partition     string `json:"partition"`
		FailedAt      string `json:"failedAt"`
	} `json:"messages"`
	Pagination struct{ Limit, Offset int } `json:"pagination"`
	Total      *int64                      `json:"total"`
}

// TestDLQFiltersAndTotal: GET /api/v1/dlq filters by partition and by
// failedAt (from/to, inclusive), and total counts every match regardless
// of limit/offset.
func TestDLQFiltersAndTotal(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	configure(t, s.base, "dq", map[string]any{"retryLimit": 0})
	pushN(t, s.base, "dq", "A", 1, 2)
	pushN(t, s.base, "dq", "B", 3, 3)
	// Dead-letter m-1, m-2 (A) then m-3 (B), one ack at a time.
	for _, p := range []string{"A", "A", "B"} {
		_, r := pop(t, s.base, popPath("dq", p), "consumerGroup=g")
		if len(r.Messages) != 1 {
			t.Fatalf("pop %s: %d", p, len(r.Messages))
		}
		if a := ack(t, s.base, r.Messages[0], "failed", "g"); !a.DLQ {
			t.Fatalf("not dead-lettered: %+v", a)
		}
	}
	list := func(query string) dlqResp {
		t.Helper()
		var d dlqResp
		if code := getJSON(t, s.base+"/api/v1/dlq?queue=dq&"+query, &d); code != 200 || d.Total == nil {
			t.Fatalf("dlq %s: %d %+v", query, code, d)
		}
		return d
	}
	ids := func(d dlqResp) string {
		out := make([]string, len(d.Messages))
		for i, m := range d.Messages {
			out[i] = m.TransactionID
		}
		return strings.Join(out, ",")
	}
	all := list("")
	if ids(all) != "m-3,m-2,m-1" || *all.Total != 3 {
		t.Fatalf("all: %s total %d", ids(all), *all.Total)
	}
	at := map[string]string{}
	for _, m := range all.Messages {
		at[m.TransactionID] = url.QueryEscape(m.FailedAt)
	}
	for _, c := range []struct{ query, want string }{
		{"partition=A", "m-2,m-1"},
		{"partition=B&consumerGroup=g", "m-3"},
		{"partition=Default", ""},
		{"from=" + at["m-2"], "m-3,m-2"},
		{"to=" + at["m-2"], "m-2,m-1"},
		{"from=" + at["m-2"] + "&to=" + at["m-2"], "m-2"},
		{"from=" + at["m-1"] + "&to=" + at["m-3"] + "&partition=A", "m-2,m-1"},
		{"from=2000-01-01", "m-3,m-2,m-1"}, // a date alone: midnight UTC
		{"to=2000-01-01", ""},
	} {
		d := list(c.query)
		if ids(d) != c.want || *d.Total != int64(len(d.Messages)) {
			t.Errorf("%s: %q total %d, want %q", c.query, ids(d), *d.Total, c.want)
		}
	}
	// total ignores paging.
	d := list("limit=1&offset=1")
	if ids(d) != "m-2" || *d.Total != 3 || d.Pagination.Limit != 1 || d.Pagination.Offset != 1 {
		t.Fatalf("page: %q total %d %+v", ids(d), *d.Total, d.Pagination)
	}
	d = list("partition=A&limit=1")
	if ids(d) != "m-2" || *d.Total != 2 {
		t.Fatalf("filtered page: %q total %d", ids(d), *d.Total)
	}
	for _, q := range []string{"from=yesterday", "to=12:00", "from=2024-13-45"} {
		code, b := get(t, s.base+"/api/v1/dlq?queue=dq&"+q)
		if code != http.StatusBadRequest || !strings.Contains(b, `"error"`) {
			t.Errorf("%s: %d %s, want 400", q, code, b)
		}
	}
}
