package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/queenmq/queen-go/bench"
)

// scenarioFlags are the flags of scenario mode.
type scenarioFlags struct {
	list, txid, broker, pgURL      string
	markdown, plots, note, results string
	madeWith                       string
	from                           string
	pgPID, repeat                  int
	durable, asJSON, listOnly      bool
	opts                           bench.ScenarioOptions
}

func listScenarios() int {
	sets := make([]string, 0, len(bench.ScenarioSets))
	for k := range bench.ScenarioSets {
		sets = append(sets, k)
	}
	slices.Sort(sets)
	for _, k := range sets {
		fmt.Printf("%s: %s\n", k, strings.Join(bench.ScenarioSets[k], ","))
	}
	fmt.Println("\npush-<C>x<N>-p<P>[-client|-minted]  C connections × N items per push over P partitions")
	fmt.Println("pop-c<C>-b<B>                       C queue-mode consumers with autoAck, batch B, draining a pre-filled queue")
	fmt.Println("fanout-g<G>-c<C>-b<B>               G consumer groups × C consumers, batch B, ack/batch, each reading all of a pre-filled queue")
	fmt.Println("fanout-g<G>-c<C>-b<B>-autoack       the same, popping with autoAck=true (no lease, no ack/batch)")
	fmt.Println("push-<C>x<N>-p<P>[k|M]-new          a queue pre-built with P partitions (k ×1000, M ×1,000,000); every item pushed to a new partition")
	fmt.Println("push-<C>x<N>-p<P>[k|M]-existing     the same queue; items pushed round-robin over the pre-built partitions")
	fmt.Println("stream-w<W>-b<B>                    W stream workers (pop batch B → state/get → map → tumbling window → cycle) on 4 × 100 pushed events")
	fmt.Println("\nA push name without -client/-minted runs the variants -txid names (default both).")
	return 0
}

// findBroker is the broker binary: -broker, else bin/queen, else queen on PATH.
func findBroker(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if st, err := os.Stat("bin/queen"); err == nil && !st.IsDir() {
		return filepath.Abs("bin/queen")
	}
	if p, err := exec.LookPath("queen"); err == nil {
		return p, nil
	}
	return "", errors.New("no broker binary: give -broker, or build bin/queen (go build -o bin/queen ./cmd/queen)")
}

// runScenarios is scenario mode (-scenario, or -from to render saved
// results). Exit status as for a single run: 1 when a scenario could not
// run, 3 when one failed verification.
func runScenarios(sf scenarioFlags) int {
	var results []*bench.ScenarioResult
	code := 0
	if sf.from != "" {
		for _, path := range strings.Split(sf.from, ",") {
			rs, err := readResults(path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "queen-bench:", err)
				return 1
			}
			results = append(results, rs...)
		}
	} else {
		txid := sf.txid
		if txid == "" {
			txid = bench.TxIDBoth
		}
		scs, err := bench.ParseScenarios(sf.list, txid)
		if err != nil {
			fmt.Fprintln(os.Stderr, "queen-bench:", err)
			return 2
		}
		bin, err := findBroker(sf.broker)
		if err != nil {
			fmt.Fprintln(os.Stderr, "queen-bench:", err)
			return 2
		}
		sf.opts.Stack = bench.StackConfig{BrokerBin: bin, PGURL: sf.pgURL, PostmasterPID: sf.pgPID, NonDurable: !sf.durable, Profile: sf.opts.ProfileDir != ""}
		var resultsFile io.WriteCloser
		if sf.results != "" {
			if resultsFile, err = os.Create(sf.results); err != nil {
				fmt.Fprintln(os.Stderr, "queen-bench:", err)
				return 1
			}
			defer resultsFile.Close()
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		text := io.Writer(os.Stdout)
		if sf.asJSON {
			text = os.Stderr
		}
		// Rounds: every scenario once, then again (-repeat), so that a
		// change in the machine's load falls on every scenario alike.
		runs := make([]bench.Scenario, 0, len(scs)*sf.repeat)
		for range sf.repeat {
			runs = append(runs, scs...)
		}
		for i, sc := range runs {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "queen-bench: scenario %d/%d %s (%s)\n", i+1, len(runs), sc.Name, sf.opts.Duration)
			r := bench.RunScenario(ctx, sc, sf.opts)
			results = append(results, r)
			_ = r.WriteText(text)
			line, err := json.Marshal(r)
			if err != nil {
				fmt.Fprintln(os.Stderr, "queen-bench:", err)
				return 1
			}
			if sf.asJSON {
				fmt.Printf("%s\n", line)
			}
			if resultsFile != nil {
				if _, err := fmt.Fprintf(resultsFile, "%s\n", line); err != nil {
					fmt.Fprintln(os.Stderr, "queen-bench:", err)
					return 1
				}
			}
			switch {
			case r.Error != "":
				code = max(code, 1)
			case !r.VerifyOK:
				code = 3
			}
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "queen-bench: interrupted")
			code = max(code, 1)
		}
	}
	if sf.markdown != "" {
		if err := writeReport(sf, results); err != nil {
			fmt.Fprintln(os.Stderr, "queen-bench:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "queen-bench: wrote %s\n", sf.markdown)
	}
	return code
}

func writeReport(sf scenarioFlags, results []*bench.ScenarioResult) error {
	o := bench.MarkdownOptions{Note: sf.note, Command: sf.madeWith, RelTo: filepath.Dir(sf.markdown)}
	if sf.plots != "" {
		plots, err := bench.WritePlots(sf.plots, results)
		if err != nil {
			return err
		}
		o.Plots = plots
	}
	f, err := os.Create(sf.markdown)
	if err != nil {
		return err
	}
	if err := bench.WriteMarkdown(f, results, o); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readResults reads a results file: one ScenarioResult as JSON per line.
func readResults(path string) ([]*bench.ScenarioResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*bench.ScenarioResult
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r bench.ScenarioResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, &r)
	}
	return out, sc.Err()
}
