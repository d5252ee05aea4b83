package maintenance_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/queenmq/queen-go/internal/maintenance"
	"github.com/queenmq/queen-go/internal/startstop"
	"github.com/queenmq/queen-go/internal/testenv"
	"github.com/queenmq/queen-go/pg"
)

// TestMain destroys the shared throwaway PostgreSQL afterwards and fails
// the run if any goroutine is left.
func TestMain(m *testing.M) { os.Exit(testenv.MainLeakChecked(m)) }

// openStore opens a pg.Store on url, closed when the test ends; a short
// connect timeout keeps tests with PostgreSQL stopped quick.
func openStore(t *testing.T, url string) *pg.Store {
	t.Helper()
	return testenv.OpenStore(t, pg.Config{URL: url, Logger: testenv.Logger, ConnectTimeout: 500 * time.Millisecond})
}

// change is one OnChange call.
type change struct {
	m  maintenance.Mode
	on bool
}

// broker is one Service (as one broker holds it) and the changes it
// reported.
type broker struct {
	svc     *maintenance.Service
	changes chan change
}

// newService returns a stopped Service on store, refreshing every
// interval (0: the default), stopped when the test ends.
func newService(t *testing.T, store maintenance.Store, interval time.Duration) *broker {
	t.Helper()
	b := &broker{changes: make(chan change, 64)}
	b.svc = maintenance.New(maintenance.Config{RefreshInterval: interval, Logger: testenv.Logger,
		OnChange: func(m maintenance.Mode, on bool) { b.changes <- change{m, on} }}, store)
	t.Cleanup(b.svc.Stop)
	return b
}

func (b *broker) start(t *testing.T) {
	t.Helper()
	if err := b.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitChange fails the test unless OnChange reports want within timeout.
func (b *broker) waitChange(t *testing.T, want change, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case c := <-b.changes:
			if c == want {
				return
			}
			t.Fatalf("OnChange(%v, %v), want OnChange(%v, %v)", c.m, c.on, want.m, want.on)
		case <-deadline:
			t.Fatalf("no OnChange(%v, %v) within %v", want.m, want.on, timeout)
		}
	}
}

// noChange fails the test if OnChange was called.
func (b *broker) noChange(t *testing.T) {
	t.Helper()
	select {
	case c := <-b.changes:
		t.Fatalf("unexpected OnChange(%v, %v)", c.m, c.on)
	default:
	}
}

// stored reads key from queen.system_state.
func stored(t *testing.T, s *pg.Store, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	on, err := s.GetFlag(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

func TestLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	b := newService(t, store, 10*time.Millisecond)
	b.svc.Stop() // before Start: a no-op
	b.start(t)
	if err := b.svc.Start(context.Background()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start: %v, want startstop.ErrStarted", err)
	}
	time.Sleep(50 * time.Millisecond) // a few refreshes
	b.svc.Stop()
	b.svc.Stop()
	store.Close()
}

// TestSetPersists: a mode set here is in effect at once, written to
// queen.system_state under Queen's key, and read by a broker that starts
// on the same database.
func TestSetPersists(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	a := newService(t, store, 0)
	a.start(t)
	a.noChange(t) // a fresh database: both off, nothing changed
	for _, m := range []maintenance.Mode{maintenance.Push, maintenance.Pop} {
		if err := a.svc.Set(context.Background(), m, true); err != nil {
			t.Fatal(err)
		}
		a.waitChange(t, change{m, true}, time.Second)
	}
	if !a.svc.PushEnabled() || !a.svc.PopEnabled() {
		t.Fatalf("push %v, pop %v after setting both", a.svc.PushEnabled(), a.svc.PopEnabled())
	}
	if !stored(t, store, maintenance.PushKey) || !stored(t, store, maintenance.PopKey) {
		t.Fatal("a mode set here is not in queen.system_state")
	}
	if err := a.svc.SetPush(context.Background(), true); err != nil { // again: no change
		t.Fatal(err)
	}
	a.noChange(t)

	b := newService(t, store, 0)
	b.start(t) // reads both before it returns
	if !b.svc.PushEnabled() || !b.svc.PopEnabled() {
		t.Fatalf("a broker starting on the database: push %v, pop %v, want both on", b.svc.PushEnabled(), b.svc.PopEnabled())
	}
	b.waitChange(t, change{maintenance.Push, true}, time.Second)
	b.waitChange(t, change{maintenance.Pop, true}, time.Second)

	if err := a.svc.SetPop(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if a.svc.PopEnabled() || stored(t, store, maintenance.PopKey) {
		t.Fatal("pop maintenance mode still on after turning it off")
	}
	a.svc.Stop()
	b.svc.Stop()
	store.Close()
}

// TestFollowsAnotherBroker: a mode set through one broker reaches another
// on the same database within its refresh interval, by default 2 s.
func TestFollowsAnotherBroker(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	a := newService(t, store, 0)
	a.start(t)
	b := newService(t, store, 0) // the default interval: DefaultRefreshInterval
	b.start(t)
	if err := a.svc.SetPush(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	b.waitChange(t, change{maintenance.Push, true}, maintenance.DefaultRefreshInterval+time.Second)
	if !b.svc.PushEnabled() {
		t.Fatal("OnChange came but PushEnabled is false")
	}

	// With a short interval, both modes, both ways.
	c := newService(t, store, 20*time.Millisecond)
	c.start(t)
	c.waitChange(t, change{maintenance.Push, true}, time.Second)
	steps := []change{{maintenance.Pop, true}, {maintenance.Push, false}, {maintenance.Pop, false}}
	for _, s := range steps {
		if err := a.svc.Set(context.Background(), s.m, s.on); err != nil {
			t.Fatal(err)
		}
		c.waitChange(t, s, 5*time.Second)
		if c.svc.Enabled(s.m) != s.on {
			t.Fatalf("%v mode %v after OnChange(%v)", s.m, c.svc.Enabled(s.m), s.on)
		}
	}
	a.svc.Stop()
	b.svc.Stop()
	c.svc.Stop()
	store.Close()
}

// TestSetWhilePostgresAway: a mode set while PostgreSQL is down takes
// effect here at once (Set reports that persisting failed), is not undone
// by the refresh while the database is away nor by the older value it
// holds when it returns, and is written to the database once it is back.
func TestSetWhilePostgresAway(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	cluster, url := testenv.OwnCluster(t)
	store := openStore(t, url)
	a := newService(t, store, 20*time.Millisecond)
	a.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.svc.SetPop(ctx, true); err != nil { // the database says pop on, push off
		t.Fatal(err)
	}
	a.waitChange(t, change{maintenance.Pop, true}, time.Second)
	if err := cluster.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}

	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := a.svc.SetPush(sctx, true)
	scancel()
	if err == nil {
		t.Fatal("SetPush with PostgreSQL down reported no error")
	}
	if !a.svc.PushEnabled() {
		t.Fatal("push maintenance mode set while PostgreSQL is down is not in effect")
	}
	a.waitChange(t, change{maintenance.Push, true}, time.Second)
	sctx, scancel = context.WithTimeout(context.Background(), 2*time.Second)
	_ = a.svc.SetPop(sctx, false)
	scancel()
	a.waitChange(t, change{maintenance.Pop, false}, time.Second)
	time.Sleep(200 * time.Millisecond) // refreshes fail meanwhile
	if !a.svc.PushEnabled() || a.svc.PopEnabled() {
		t.Fatalf("while PostgreSQL is down: push %v, pop %v, want on, off", a.svc.PushEnabled(), a.svc.PopEnabled())
	}

	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the modes set while PostgreSQL was down to be persisted", func() bool {
		push, err1 := store.GetFlag(ctx, maintenance.PushKey)
		pop, err2 := store.GetFlag(ctx, maintenance.PopKey)
		return err1 == nil && err2 == nil && push && !pop
	})
	time.Sleep(100 * time.Millisecond) // more refreshes, now reading
	if !a.svc.PushEnabled() || a.svc.PopEnabled() {
		t.Fatalf("after PostgreSQL returned: push %v, pop %v, want on, off", a.svc.PushEnabled(), a.svc.PopEnabled())
	}
	a.noChange(t)
	a.svc.Stop()
	store.Close()
}

// TestConcurrentSets: sets racing each other and the refresh leave the
// database holding the value in effect here.
func TestConcurrentSets(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), testenv.IgnoreServers)
	store := openStore(t, testenv.NewDatabase(t))
	a := newService(t, store, 5*time.Millisecond)
	a.start(t)
	go func() { // drain OnChange
		for range a.changes {
		}
	}()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if err := a.svc.SetPush(context.Background(), i%2 == 0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got, want := stored(t, store, maintenance.PushKey), a.svc.PushEnabled(); got != want {
		t.Fatalf("the database holds %v, this broker %v", got, want)
	}
	a.svc.Stop()
	close(a.changes)
	store.Close()
}
