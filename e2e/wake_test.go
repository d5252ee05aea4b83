package e2e

import (
	"testing"
	"time"

	"github.com/queenmq/queen-go/internal/testenv"
)

// TestLongPollWokenAcrossBrokers: a pop waiting on one broker is answered
// soon after another broker on the same database commits a push to its
// queue: the commit's NOTIFY reaches the waiting broker's LISTEN
// connection (pg.Listener). Without it the pop would sleep until its next
// safety recheck, 30 s, past its 20 s timeout.
func TestLongPollWokenAcrossBrokers(t *testing.T) {
	t.Parallel()
	url := testenv.NewDatabase(t)
	b1 := testenv.StartBroker(t, url, "", nil)
	b2 := testenv.StartBroker(t, url, "", nil)
	base1, base2 := "http://"+b1.Addr(), "http://"+b2.Addr()
	configure(t, base1, "xw", nil)
	done := make(chan popResp, 1)
	go func() {
		_, r := pop(t, base2, popPath("xw", ""), "wait=true&timeout=20000&autoAck=true")
		done <- r
	}()
	time.Sleep(500 * time.Millisecond) // the pop is waiting on broker 2
	pushed := time.Now()
	wantStatuses(t, push(t, base1, body(item{"xw", "P", 1, "across"})), Q)
	select {
	case r := <-done:
		if len(r.Messages) != 1 || r.Messages[0].TransactionID != "across" {
			t.Fatalf("the waiting pop got %+v", r.Messages)
		}
		if d := time.Since(pushed); d > 5*time.Second {
			t.Fatalf("the waiting pop on broker 2 was answered %v after the push on broker 1", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the pop waiting on broker 2 was not woken by a push on broker 1")
	}
}
