// Command queen-bench pushes load at a broker's POST /api/v1/push, reports
// throughput, latency percentiles and memory, then reads the queue back
// from PostgreSQL and verifies that every accepted item is stored exactly
// once, in each producer's order (see package bench).
//
//	queen-bench -url http://127.0.0.1:6632 -producers 8 -batch 100 -duration 10s -pg postgres://…
//
// With -consumers, consumers long-poll the queue while the producers push
// (in -groups named consumer groups, or one queue-mode group with -groups
// 0), ack what they pop, and drain the queue after the producers stop;
// the report adds consume throughput, pop and end-to-end latency, and
// checks that every group received every accepted item exactly once, in
// each producer's order per partition.
//
//	queen-bench -producers 4 -batch 10 -duration 10s -consumers 2 -groups 2 -pop-batch 100
//
// With -scenario, it runs named scenarios instead, each on a fresh broker
// (the -broker binary, started as a child process so that its memory and
// CPU can be read from /proc) and a fresh, durable PostgreSQL cluster of
// its own, and prints for each msg/s, queued and buffered counts, latency
// percentiles, broker peak RSS, broker and PostgreSQL CPU per message,
// PostgreSQL bytes per message and the verification verdict (-json: one
// JSON object per line instead). -markdown and -plots write the published
// report (make bench).
//
//	queen-bench -scenario rows -duration 10s -markdown BENCHMARKS.md -plots docs/bench
//	queen-bench -scenario push-8x100-p10,pop-c10-b100 -txid minted -json
//
// With -repeat N, every scenario runs N times, in rounds; the report
// shows each scenario's run of the median msg/s and the range over its
// runs, and checks the rows against the project's targets
// (docs/benchmarking.md).
//
// With -serve, it starts such a broker and cluster and keeps them for
// another load generator (scripts/wrk-push.sh drives wrk with it).
//
// Exit status: 0 when the run completed and verification (if any) found no
// problem, 1 on a run or verification error, 2 for bad flags, 3 when
// verification (of the stored queue or of what the consumers received)
// found problems.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/queenmq/queen-go/bench"
	"github.com/queenmq/queen-go/pg"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("queen-bench", flag.ContinueOnError)
	var cfg bench.Config
	fs.StringVar(&cfg.URL, "url", bench.DefaultURL, "broker base URL")
	fs.IntVar(&cfg.Producers, "producers", bench.DefaultProducers, "concurrent producers (one request in flight each)")
	fs.IntVar(&cfg.Batch, "batch", bench.DefaultBatch, "items per push")
	fs.IntVar(&cfg.Partitions, "partitions", bench.DefaultPartitions, "partitions p0..pN-1, used round-robin")
	fs.IntVar(&cfg.PayloadBytes, "payload", bench.DefaultPayloadBytes, "payload size in bytes (a JSON object)")
	fs.BoolVar(&cfg.RandomPayload, "random-payload", false, "pad payloads with random characters, which do not compress, instead of 'x' bytes (scenarios: the -random suffix)")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "how long to push")
	fs.StringVar(&cfg.Queue, "queue", "", "queue name (default bench-<unix time>)")
	fs.DurationVar(&cfg.RequestTimeout, "timeout", bench.DefaultRequestTimeout, "timeout of one push request")
	fs.IntVar(&cfg.BrokerPID, "broker-pid", 0, "broker PID on this host, to report its peak RSS (VmHWM)")
	pgURL := fs.String("pg", os.Getenv("QUEEN_PG_URL"), "PostgreSQL URL for verification (default $QUEEN_PG_URL; empty skips verification)")
	verifyTimeout := fs.Duration("verify-timeout", bench.DefaultVerifyTimeout, "how long to wait for accepted items to be stored")
	asJSON := fs.Bool("json", false, "also print the report as JSON")
	fs.IntVar(&cfg.Consumers, "consumers", 0, "consumer goroutines per consumer group (0: no consumers)")
	groups := fs.Int("groups", bench.DefaultGroups, "named consumer groups bench-g0.. that each get every message; 0: one queue-mode group (no consumerGroup)")
	fs.IntVar(&cfg.PopBatch, "pop-batch", bench.DefaultPopBatch, "most messages per pop")
	fs.BoolVar(&cfg.AutoAck, "auto-ack", false, "pop with autoAck=true instead of acking each batch with ack/batch")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", bench.DefaultDrainTimeout, "after the producers stop, how long consumers keep popping until every group has everything")
	txid := fs.String("txid", "", "transaction ids: client (every item carries one, \"<run>-<p>-<seq>\"), uuid7 (every item carries one, UUIDv7 text as Queen's SDKs send), minted (none: the broker mints them); with -scenario also both (default both with -scenario, client without)")
	sf := scenarioFlags{}
	fs.StringVar(&sf.list, "scenario", "", "run scenarios, each on a fresh broker and database: comma-separated names or sets (rows, sweep, smoke, all); see -list")
	fs.BoolVar(&sf.listOnly, "list", false, "list the scenarios of every set and exit")
	fs.StringVar(&sf.broker, "broker", "", "with -scenario: the broker binary (default bin/queen, else queen on PATH)")
	fs.BoolVar(&sf.durable, "durable", true, "with -scenario: the throwaway PostgreSQL is durable (fsync, synchronous_commit, full_page_writes on); false marks every row non-durable")
	fs.IntVar(&sf.pgPID, "pg-pid", 0, "with -scenario -pg: that server's postmaster PID on this host, to measure its CPU")
	fs.StringVar(&sf.markdown, "markdown", "", "with -scenario or -from: write the Markdown report (one table, machine, commit, PostgreSQL settings) to this file")
	fs.StringVar(&sf.plots, "plots", "", "with -markdown: write the PNG plots into this directory and link them")
	fs.StringVar(&sf.note, "note", "", "with -markdown: a warning printed at the top of the report")
	profileDir := fs.String("profile", "", "with -scenario: profile each measured phase into this directory (NAME.broker.pprof, a broker CPU profile; NAME.pgss.txt, PostgreSQL's top statements from pg_stat_statements); profiled figures are not report figures")
	fs.StringVar(&sf.results, "results", "", "with -scenario: also write each result as a JSON line to this file")
	fs.StringVar(&sf.madeWith, "made-with", "", "with -markdown: how the report was made, printed in it (default the queen-bench command line)")
	fs.StringVar(&sf.from, "from", "", "render -markdown/-plots from results files (JSON lines; comma-separated, read in order) instead of running")
	fs.IntVar(&sf.repeat, "repeat", 1, "with -scenario: run the list this many times, in rounds (every scenario once, then again); the report shows each scenario's run of the median msg/s and the range over its runs")
	serveOnly := fs.Bool("serve", false, "start a fresh broker (-broker) on a fresh PostgreSQL (durable unless -durable=false), print {url, pg_url, broker_pid, postmaster_pid, durable} as one JSON line, and keep both until SIGINT or SIGTERM: for another load generator (scripts/wrk-push.sh)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "queen-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if sf.repeat < 1 || (sf.repeat > 1 && (sf.list == "" || sf.from != "")) {
		fmt.Fprintln(os.Stderr, "queen-bench: -repeat must be at least 1, and runs scenarios: it needs -scenario and no -from")
		return 2
	}
	if sf.listOnly {
		return listScenarios()
	}
	if *serveOnly {
		return serve(sf)
	}
	if sf.list != "" || sf.from != "" {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "pg" {
				sf.pgURL = *pgURL // only an explicit -pg: QUEEN_PG_URL alone does not move scenarios off a fresh cluster
			}
		})
		sf.asJSON, sf.txid = *asJSON, *txid
		sf.opts = bench.ScenarioOptions{Duration: cfg.Duration, PayloadBytes: cfg.PayloadBytes,
			RequestTimeout: cfg.RequestTimeout, VerifyTimeout: *verifyTimeout, ProfileDir: *profileDir}
		if sf.madeWith == "" {
			sf.madeWith = strings.Join(os.Args, " ")
		}
		return runScenarios(sf)
	}
	switch *txid {
	case "", bench.TxIDClient:
	case bench.TxIDMinted:
		cfg.MintedIDs = true
	case bench.TxIDUUID7:
		cfg.UUID7IDs = true
	default:
		fmt.Fprintf(os.Stderr, "queen-bench: -txid %q: want client, minted or uuid7\n", *txid)
		return 2
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"producers", cfg.Producers}, {"batch", cfg.Batch}, {"partitions", cfg.Partitions}} {
		if v.n < 1 {
			fmt.Fprintf(os.Stderr, "queen-bench: -%s must be at least 1\n", v.name)
			return 2
		}
	}
	if cfg.PayloadBytes < 1 || cfg.Duration <= 0 || cfg.RequestTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "queen-bench: -payload, -duration and -timeout must be positive")
		return 2
	}
	if cfg.Consumers < 0 || *groups < 0 {
		fmt.Fprintln(os.Stderr, "queen-bench: -consumers and -groups must not be negative")
		return 2
	}
	if cfg.PopBatch < 1 || cfg.PopBatch > bench.MaxPopBatch || cfg.DrainTimeout <= 0 {
		fmt.Fprintf(os.Stderr, "queen-bench: -pop-batch must be 1..%d and -drain-timeout positive\n", bench.MaxPopBatch)
		return 2
	}
	cfg.Groups, cfg.QueueMode = *groups, *groups == 0

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(os.Stderr, "queen-bench: pushing to %s for %s (%d producers, batch %d)\n",
		cfg.URL, cfg.Duration, cfg.Producers, cfg.Batch)
	if cfg.Consumers > 0 {
		mode := fmt.Sprintf("%d named groups", cfg.Groups)
		if cfg.QueueMode {
			mode = "queue mode"
		}
		fmt.Fprintf(os.Stderr, "queen-bench: consuming with %d consumers per group, %s, pop batch %d\n",
			cfg.Consumers, mode, cfg.PopBatch)
	}
	r, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queen-bench:", err)
		if errors.Is(err, bench.ErrConfig) {
			return 2
		}
		return 1
	}

	code := 0
	if *pgURL == "" {
		fmt.Fprintln(os.Stderr, "queen-bench: no -pg and no QUEEN_PG_URL: verification skipped")
	} else {
		v, err := verify(ctx, *pgURL, r, *verifyTimeout)
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "queen-bench: verify:", err)
			code = 1
		case !v.OK():
			code = 3
		}
		r.Verify = v
	}
	if r.Consume != nil && !r.Consume.OK() {
		code = max(code, 3)
	}
	if err := r.WriteText(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "queen-bench:", err)
		return 1
	}
	if *pgURL == "" {
		fmt.Println("\nverify: skipped (no -pg and no QUEEN_PG_URL)")
	}
	if *asJSON {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			fmt.Fprintln(os.Stderr, "queen-bench:", err)
			return 1
		}
		fmt.Printf("\n%s\n", b)
	}
	return code
}

func verify(ctx context.Context, url string, r *bench.Report, timeout time.Duration) (*bench.VerifyResult, error) {
	store, err := pg.Open(pg.Config{URL: url})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if n := r.Status.Buffered; n > 0 {
		fmt.Fprintf(os.Stderr, "queen-bench: verify: %d items were answered buffered; waiting up to %s for them\n", n, timeout)
	}
	return bench.Verify(ctx, store, r.Ledger, timeout)
}
