package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/maintenance"
	"github.com/queenmq/queen-go/internal/testenv"
)

// TestMaintenanceFollowedAcrossBrokers: push and pop maintenance mode set
// through one broker reach another broker on the same database within the
// flag refresh (2 s): its pushes are answered buffered and not projected,
// its pops answer 204; turned off through the first broker, the second
// drains its WAL.
func TestMaintenanceFollowedAcrossBrokers(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabase(t)
	b1 := testenv.StartBroker(t, url, "", nil)
	b2 := testenv.StartBroker(t, url, "", nil)
	base1, base2 := "http://"+b1.Addr(), "http://"+b2.Addr()
	store := openStore(t, url)
	wantStatuses(t, push(t, base2, body(item{"mx", "P", 0, "before"})), Q)

	setMaintenance(t, base1, true)
	follow := maintenance.DefaultRefreshInterval + 3*time.Second
	testenv.WaitFor(t, follow, "broker 2 to follow push maintenance mode", b2.Maintenance.PushEnabled)
	wantStatuses(t, push(t, base2, body(item{"mx", "P", 1, "during"})), B)
	time.Sleep(300 * time.Millisecond) // the projector holds
	if n := len(readPartition(t, store, "mx", "P")); n != 1 {
		t.Fatalf("broker 2 projected during maintenance: %d messages, want 1", n)
	}

	if code, rb := post(t, base1, "/api/v1/system/maintenance/pop", []byte(`{"enabled":true}`)); code != http.StatusOK {
		t.Fatalf("pop maintenance: %d %s", code, rb)
	}
	testenv.WaitFor(t, follow, "broker 2 to follow pop maintenance mode", b2.Maintenance.PopEnabled)
	if code, _ := pop(t, base2, popPath("mx", "P"), ""); code != http.StatusNoContent {
		t.Fatalf("pop on broker 2 in pop maintenance: %d, want 204", code)
	}

	setMaintenance(t, base1, false)
	testenv.WaitFor(t, follow+10*time.Second, "broker 2 to drain after maintenance", func() bool {
		return len(readPartition(t, store, "mx", "P")) == 2
	})
}

// TestMaintenanceSetWhileDatabaseAway: maintenance mode turned on while
// PostgreSQL is stopped takes effect at once (pushes buffered), is still on
// when the database returns (not undone by the older value it holds), is
// persisted then, and a broker started afterwards on that database starts
// in it.
func TestMaintenanceSetWhileDatabaseAway(t *testing.T) {
	t.Parallel()
	c, url := testenv.OwnCluster(t)
	b := testenv.StartBroker(t, url, "", nil)
	base := "http://" + b.Addr()
	wantStatuses(t, push(t, base, body(item{"mw", "P", 0, "before"})), Q)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}
	setMaintenance(t, base, true) // 200: in effect here, persisting failed
	if !b.Maintenance.PushEnabled() {
		t.Fatal("maintenance mode set with PostgreSQL down is not in effect")
	}
	wantStatuses(t, push(t, base, body(item{"mw", "P", 1, "during"})), B)

	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	store := openStore(t, url)
	testenv.WaitFor(t, 30*time.Second, "the flag to be persisted", func() bool {
		on, err := store.GetFlag(ctx, maintenance.PushKey)
		return err == nil && on
	})
	time.Sleep(maintenance.DefaultRefreshInterval + 500*time.Millisecond) // a refresh that reads
	if !b.Maintenance.PushEnabled() {
		t.Fatal("maintenance mode was undone when PostgreSQL returned")
	}
	if n := len(readPartition(t, store, "mw", "P")); n != 1 {
		t.Fatalf("projected during maintenance: %d messages, want 1", n)
	}

	b2 := testenv.StartBroker(t, url, "", nil)
	if !b2.Maintenance.PushEnabled() {
		t.Fatal("a broker started on the database is not in maintenance mode")
	}
	wantStatuses(t, push(t, "http://"+b2.Addr(), body(item{"mw", "P", 2, "second"})), B)
	setMaintenance(t, base, false)
	testenv.WaitFor(t, 20*time.Second, "both brokers to drain", func() bool {
		return len(readPartition(t, store, "mw", "P")) == 3
	})
}
