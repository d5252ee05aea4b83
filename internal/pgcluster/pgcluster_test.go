package pgcluster

import (
	"context"
	"testing"
	"time"
)

// TestStandbyLagAndPromote: a row committed before WaitReplicated is on
// the standby; a row committed while the WAL senders are paused is not,
// and after the primary is killed and the standby promoted the standby
// holds the first row only and accepts writes.
func TestStandbyLagAndPromote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := StartPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Destroy()
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Destroy()
	sql := func(c *Cluster, q string) string {
		t.Helper()
		out, err := c.psql(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sql(primary, "CREATE TABLE t (v text); INSERT INTO t VALUES ('replicated')")
	if err := primary.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sql(standby, "SELECT string_agg(v, ',') FROM t"); got != "replicated" {
		t.Fatalf("standby holds %q after WaitReplicated", got)
	}
	resume, err := primary.PauseWALSenders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sql(primary, "INSERT INTO t VALUES ('lagged'); SELECT pg_switch_wal()")
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if err := primary.WaitReplicated(wctx); err == nil {
		t.Fatal("the standby caught up with its WAL sender paused")
	}
	wcancel()
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = resume()
	if got := sql(standby, "SELECT pg_is_in_recovery()"); got != "t" {
		t.Fatalf("standby in recovery before Promote: %q", got)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sql(standby, "SELECT pg_is_in_recovery()"); got != "f" {
		t.Fatalf("standby in recovery after Promote: %q", got)
	}
	sql(standby, "INSERT INTO t VALUES ('after')")
	if got := sql(standby, "SELECT string_agg(v, ',' ORDER BY v) FROM t"); got != "after,replicated" {
		t.Fatalf("promoted standby holds %q, want after,replicated", got)
	}
}

// TestFailoverDSN names every host in order with read-write sessions.
func TestFailoverDSN(t *testing.T) {
	got := FailoverDSN("db1", &Cluster{Port: 5001}, &Cluster{Port: 5002})
	want := "host=127.0.0.1,127.0.0.1 port=5001,5002 user=postgres dbname=db1 sslmode=disable target_session_attrs=read-write"
	if got != want {
		t.Fatalf("FailoverDSN = %q, want %q", got, want)
	}
}
