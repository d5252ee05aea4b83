package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildBroker builds the queen command into a temporary directory.
func buildBroker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "queen")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/queenmq/queen-go/cmd/queen")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRunScenarios runs scenarios for real, each on its own fresh broker
// process and throwaway PostgreSQL cluster: a push scenario in both id
// variants on a durable cluster, and a fan-out scenario on a non-durable
// one; every figure the report publishes must have been measured.
func TestRunScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and PostgreSQL clusters")
	}
	bin := buildBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := ScenarioOptions{Stack: StackConfig{BrokerBin: bin}, Duration: 500 * time.Millisecond, PayloadBytes: 128}

	for _, name := range []string{"push-2x10-p3-client", "push-2x10-p3-minted"} {
		sc, err := ParseScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		r := RunScenario(ctx, sc, opts)
		if !r.OK() {
			t.Fatalf("%s: error %q, problems %q", name, r.Error, r.Problems)
		}
		if !r.Durable || r.PG.Settings["fsync"] != "on" || r.PG.Settings["synchronous_commit"] != "on" || r.PG.Version == "" {
			t.Errorf("%s: durable %v, PostgreSQL %+v", name, r.Durable, r.PG)
		}
		if r.Messages == 0 || r.Messages != r.Status.Queued+r.Status.Buffered || r.StoredMessages != r.Messages {
			t.Errorf("%s: messages %d, status %+v, stored %d", name, r.Messages, r.Status, r.StoredMessages)
		}
		if r.MsgPerSec <= 0 || r.Latency.Count == 0 || r.Latency.P99ms <= 0 {
			t.Errorf("%s: msg/s %.0f, latency %+v", name, r.MsgPerSec, r.Latency)
		}
		if r.BrokerPeakRSSBytes < 1<<20 || r.BrokerCPUSec <= 0 || !r.PGCPUMeasured || r.PGCPUSec <= 0 || r.CPUPerMsgUs <= 0 {
			t.Errorf("%s: RSS %d, CPU broker %.3f s PostgreSQL %.3f s (measured %v), %.1f µs/msg", name,
				r.BrokerPeakRSSBytes, r.BrokerCPUSec, r.PGCPUSec, r.PGCPUMeasured, r.CPUPerMsgUs)
		}
		if r.Storage.SegmentsBytes <= 0 || r.SegmentsPerMsg <= 0 || r.Storage.SchemaBytes < r.Storage.SegmentsBytes+r.Storage.DedupBytes {
			t.Errorf("%s: storage %+v, %.0f B/msg", name, r.Storage, r.SegmentsPerMsg)
		}
		if sc.TxIDs == TxIDClient && r.Storage.DedupBytes <= 0 {
			t.Errorf("%s: client ids but no dedup bytes: %+v", name, r.Storage)
		}
		if r.Machine.Cores == 0 || r.Push == nil || r.Push.Verify == nil {
			t.Errorf("%s: machine %+v, report %v", name, r.Machine, r.Push)
		}
	}

	opts.Stack.NonDurable = true
	sc, _ := ParseScenario("fanout-g2-c1-b50")
	r := RunScenario(ctx, sc, opts)
	if !r.OK() {
		t.Fatalf("fan-out: error %q, problems %q", r.Error, r.Problems)
	}
	if r.Durable || r.PG.Settings["fsync"] != "off" {
		t.Errorf("non-durable cluster reported durable: %+v", r.PG.Settings)
	}
	prefilled := r.Status.Queued + r.Status.Buffered
	if r.Push.Consume == nil || r.Messages != 2*prefilled || len(r.Push.Consume.Groups) != 2 || r.MsgPerSec <= 0 {
		t.Errorf("fan-out: %d deliveries of %d prefilled, consume %+v", r.Messages, prefilled, r.Push.Consume)
	}
	if r.BrokerCPUSec <= 0 || r.PGCPUSec <= 0 {
		t.Errorf("fan-out: CPU broker %.3f PostgreSQL %.3f", r.BrokerCPUSec, r.PGCPUSec)
	}
}

// TestStackBrokerFails: a broker that cannot start is reported with its
// log, and nothing is left behind.
func TestStackBrokerFails(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	script := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'cannot open WAL' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := StartStack(context.Background(), StackConfig{BrokerBin: script, NonDurable: true})
	if err == nil {
		st.Stop()
		t.Fatal("a broken broker started")
	}
	if !errors.Is(err, ErrBrokerStart) || !strings.Contains(err.Error(), "cannot open WAL") {
		t.Errorf("err %v", err)
	}
}

// TestRunStreamAndPartitionScenarios runs a stream scenario and both
// many-partitions scenarios (a small pre-build) for real on non-durable
// clusters: the figures must be measured and the exactly-once and
// partition checks must pass.
func TestRunStreamAndPartitionScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and PostgreSQL clusters")
	}
	bin := buildBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := ScenarioOptions{Stack: StackConfig{BrokerBin: bin, NonDurable: true}, Duration: 500 * time.Millisecond, PayloadBytes: 128}

	sc, err := ParseScenario("stream-w2-b50")
	if err != nil {
		t.Fatal(err)
	}
	r := RunScenario(ctx, sc, opts)
	if !r.OK() {
		t.Fatalf("stream: error %q, problems %q", r.Error, r.Problems)
	}
	s := r.Stream
	accepted := r.Status.Queued + r.Status.Buffered
	if s == nil || accepted == 0 || s.Events != accepted || r.Messages != accepted || s.ExpectedEvents != accepted {
		t.Fatalf("stream: %d accepted, report %+v", accepted, s)
	}
	if s.AggEvents != accepted || s.AggSum != s.ExpectedSum || s.ExpectedSum <= accepted {
		t.Errorf("stream: aggregates %d/%d, want %d/%d", s.AggEvents, s.AggSum, accepted, s.ExpectedSum)
	}
	// 4 × 100 events per push round over 10 partitions: a window of 250
	// offsets closes once a partition has 250 events.
	if s.Cycles == 0 || s.EventsPerSec <= 0 || s.CyclesPerSec <= 0 || s.CycleLatency.Count != int(s.Cycles) || s.CycleLatency.P99ms <= 0 {
		t.Errorf("stream: cycles %d, %.0f events/s, %.0f cycles/s, latency %+v", s.Cycles, s.EventsPerSec, s.CyclesPerSec, s.CycleLatency)
	}
	if accepted >= 10*int64(sc.Window) && (s.WindowsClosed == 0 || s.SinkMessages != s.WindowsClosed) {
		t.Errorf("stream: %d accepted but %d windows closed, %d in the sink", accepted, s.WindowsClosed, s.SinkMessages)
	}
	// Open windows hold the events no closed window holds: none when every
	// partition's events fill whole windows (a run that reaches the same
	// count on every partition, a multiple of the window).
	if allClosed := int64(s.WindowsClosed)*int64(sc.Window) == accepted; (s.StateRows == 0) != allClosed {
		t.Errorf("stream: %d open windows, %d closed of %d events for %d accepted", s.StateRows, s.WindowsClosed, sc.Window, accepted)
	}
	if s.SinkDuplicates+s.DuplicateWindows+s.PartialWindows+s.CommittedTwice+s.NotCommitted != 0 {
		t.Errorf("stream: %+v", s)
	}
	if r.MsgPerSec != s.EventsPerSec || r.BrokerCPUSec <= 0 || r.PGCPUSec <= 0 || r.CPUPerMsgUs <= 0 || r.StoredMessages != accepted {
		t.Errorf("stream: msg/s %.0f, CPU broker %.3f PostgreSQL %.3f (%.1f µs/event), stored %d", r.MsgPerSec,
			r.BrokerCPUSec, r.PGCPUSec, r.CPUPerMsgUs, r.StoredMessages)
	}

	for _, name := range []string{"push-2x10-p2k-new", "push-2x10-p2k-existing"} {
		sc, err := ParseScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		r := RunScenario(ctx, sc, opts)
		if !r.OK() {
			t.Fatalf("%s: error %q, problems %q", name, r.Error, r.Problems)
		}
		p := r.Partitions
		accepted := r.Status.Queued + r.Status.Buffered
		if p == nil || p.Prebuilt != 2000 || p.Before != 2001 || accepted == 0 || r.StoredMessages != accepted {
			t.Fatalf("%s: %d accepted, %d stored, partitions %+v", name, accepted, r.StoredMessages, p)
		}
		want := int64(0)
		if sc.FreshPartitions {
			want = accepted
		}
		if p.Created != want || p.After != p.Before+want || (want > 0) != (p.CreatedPerSec > 0) {
			t.Errorf("%s: created %d (%.0f/s), want %d: %+v", name, p.Created, p.CreatedPerSec, want, p)
		}
		if r.MsgPerSec <= 0 || r.Latency.Count == 0 || r.BrokerCPUSec <= 0 || r.PGCPUSec <= 0 {
			t.Errorf("%s: msg/s %.0f, latency %+v, CPU %.3f/%.3f", name, r.MsgPerSec, r.Latency, r.BrokerCPUSec, r.PGCPUSec)
		}
	}
}
