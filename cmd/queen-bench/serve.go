package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/queenmq/queen-go/bench"
)

// serveInfo is the one JSON line -serve prints once its stack is up.
type serveInfo struct {
	URL           string `json:"url"`
	PGURL         string `json:"pg_url"`
	BrokerPID     int    `json:"broker_pid"`
	PostmasterPID int    `json:"postmaster_pid"`
	Durable       bool   `json:"durable"`
}

// serve starts the stack a scenario runs on (a fresh broker, the -broker
// binary, on a fresh PostgreSQL: durable unless -durable=false), prints
// serveInfo as one JSON line on stdout, and keeps both until SIGINT or
// SIGTERM, then stops them and removes the cluster and the WAL. It is for
// load generators other than queen-bench's own (scripts/wrk-push.sh): they
// read the broker's URL and the process ids whose CPU they measure from
// that line.
func serve(sf scenarioFlags) int {
	bin, err := findBroker(sf.broker)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queen-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := bench.StartStack(ctx, bench.StackConfig{BrokerBin: bin, NonDurable: !sf.durable})
	if err != nil {
		fmt.Fprintln(os.Stderr, "queen-bench: -serve:", err)
		return 1
	}
	defer st.Stop()
	line, err := json.Marshal(serveInfo{URL: st.URL, PGURL: st.PGURL, BrokerPID: st.BrokerPID,
		PostmasterPID: st.PostmasterPID, Durable: sf.durable})
	if err != nil {
		fmt.Fprintln(os.Stderr, "queen-bench: -serve:", err)
		return 1
	}
	fmt.Println(string(line))
	<-ctx.Done()
	return 0
}
