package fastapi

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBodyBudgetGivenBack: whatever becomes of a body (received and
// answered, over the limit, cut short by the client), every byte it took
// from the budget is given back once its request is done.
func TestBodyBudgetGivenBack(t *testing.T) {
	t.Parallel()
	const budget = 4 << 20
	s, err := New(Config{MaxBodyBytes: 1 << 20, BodyMemoryBytes: budget, ReadTimeout: 2 * time.Second}, fullDeps())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { _ = s.srv.Shutdown() })
	url := "http://" + ln.Addr().String() + "/api/v1/stats/refresh"
	post := func(body string) int {
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			return 0 // a body over the limit may meet the connection's close
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	settled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for s.bodies.left.Load() != budget {
			if time.Now().After(deadline) {
				t.Fatalf("after %s: %d bytes of the budget left, want %d", what, s.bodies.left.Load(), budget)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		name string
		body string
		want int
	}{
		{"small", "{}", http.StatusOK},
		{"64 KiB", "{}" + strings.Repeat(" ", bodyFreeBytes-2), http.StatusOK},
		{"900 KB", "{}" + strings.Repeat(" ", 900_000), http.StatusOK},
		{"bad JSON of 500 KB", "[" + strings.Repeat(" ", 500_000), http.StatusBadRequest},
	} {
		if got := post(c.body); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
		settled(c.name)
	}
	// Over the limit (read until past it, then 413).
	post("{}" + strings.Repeat(" ", 2<<20))
	settled("a body over the limit")
	// Cut short by the client mid-body.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var req bytes.Buffer
	req.WriteString("POST /api/v1/stats/refresh HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{}")
	req.WriteString(strings.Repeat(" ", 600_000))
	if _, err := c.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.bodies.left.Load() == budget { // until the server has read past 64 KiB
		if time.Now().After(deadline) {
			t.Fatal("the partial body never took from the budget")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	settled("a body cut short")
}
