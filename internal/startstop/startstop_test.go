package startstop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitOrTimeout fails the test unless ch is closed within 5 s.
func waitOrTimeout(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// loopUntilDone is a run function that signals when it runs and returns
// when its context ends.
func loopUntilDone(running chan<- struct{}) func(context.Context) {
	return func(ctx context.Context) {
		close(running)
		<-ctx.Done()
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	var l Loop
	running := make(chan struct{})
	if err := l.Start(context.Background(), loopUntilDone(running)); err != nil {
		t.Fatal(err)
	}
	waitOrTimeout(t, running, "the loop to run")
	l.Stop()
	select {
	case <-l.Done():
	default:
		t.Fatal("Stop returned before the loop did")
	}
	l.Stop() // idempotent
}

func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	var l Loop
	l.Stop()
	l.Stop()
	if l.Done() != nil {
		t.Fatal("Done before Start is not nil")
	}
	// Stop before Start does not keep the service from starting.
	running := make(chan struct{})
	if err := l.Start(context.Background(), loopUntilDone(running)); err != nil {
		t.Fatal(err)
	}
	waitOrTimeout(t, running, "the loop to run")
	l.Stop()
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	var l Loop
	running := make(chan struct{})
	if err := l.Start(context.Background(), loopUntilDone(running)); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), func(context.Context) { t.Error("second loop ran") }); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	l.Stop()
	if err := l.Start(context.Background(), func(context.Context) { t.Error("loop ran after Stop") }); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Stop: %v, want ErrStarted", err)
	}
}

// TestParentContextEnds: the loop ends with the context given to Start;
// Stop afterwards returns at once.
func TestParentContextEnds(t *testing.T) {
	t.Parallel()
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx, func(ctx context.Context) { <-ctx.Done() }); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitOrTimeout(t, l.Done(), "the loop to end with its parent context")
	l.Stop()
}

func TestConcurrentStop(t *testing.T) {
	t.Parallel()
	var l Loop
	if err := l.Start(context.Background(), func(ctx context.Context) { <-ctx.Done() }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(l.Stop)
	}
	wg.Wait()
	waitOrTimeout(t, l.Done(), "the loop to end")
}
