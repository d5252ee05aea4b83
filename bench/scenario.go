package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Scenario kinds.
const (
	// KindPush: producers push for the run's duration; the figures are of
	// the pushes.
	KindPush = "push"
	// KindPop: a queue is pre-filled, then queue-mode consumers drain it
	// with autoAck; the figures are of the drain.
	KindPop = "pop"
	// KindFanout: a queue is pre-filled, then several named consumer groups
	// each read all of it, acknowledging every pop with ack/batch (or, with
	// the -autoack suffix, popping with autoAck=true: each pop moves the
	// group's cursor in its own commit, no lease, no ack); the figures are of
	// the drain, counting each group's deliveries.
	KindFanout = "fanout"
	// KindPartitions: a queue is pre-built with many partitions (SQL, before
	// the measured phase), then producers push either to fresh partitions
	// (each item creates one) or to the existing ones; the figures are of
	// the pushes.
	KindPartitions = "partitions"
	// KindStream: producers push events while stream workers run a
	// map → tumbling window → sink query on them through the stream routes
	// (pop, state/get, one cycle per pop); the figures are of the events
	// processed.
	KindStream = "stream"
)

// Transaction id variants of a push scenario.
const (
	// TxIDClient: every item carries a client transactionId (as Queen's
	// SDKs send), so every item is a dedup window entry.
	TxIDClient = "client"
	// TxIDMinted: items carry none; the broker mints each one's.
	TxIDMinted = "minted"
	// TxIDUUID7: every item carries a client transactionId in the form
	// Queen's SDKs mint it, the lowercase text of a version-7 UUID made as
	// the request is built (Config.UUID7IDs). Not part of TxIDBoth.
	TxIDUUID7 = "uuid7"
	// TxIDBoth expands a push scenario into both variants.
	TxIDBoth = "both"
)

// Prefill of the pop and fan-out scenarios: the queue they drain is
// filled by prefillProducers × prefillBatch pushes with minted ids over
// the scenario's partitions, for the run's duration.
const (
	prefillProducers = 8
	prefillBatch     = 100
)

// Stream scenarios: the events are pushed by streamProducers ×
// streamBatch pushes with minted ids over streamPartitions source
// partitions, and aggregated in tumbling windows of streamWindow offsets
// of a partition.
const (
	streamProducers  = 4
	streamBatch      = 100
	streamPartitions = 10
	streamWindow     = 250
)

// Scenario is one measured situation. Every scenario runs on a fresh
// broker and a fresh database (see RunScenario).
type Scenario struct {
	// Name is the scenario's name, which also spells it:
	//   push-<C>x<N>-p<P>-<client|minted>  C connections (producers, one push
	//                                      in flight each) × N items per push over P partitions
	//   pop-c<C>-b<B>                      C queue-mode consumers, autoAck, batch B
	//   fanout-g<G>-c<C>-b<B>              G consumer groups × C consumers, batch B, ack/batch
	//   fanout-g<G>-c<C>-b<B>-autoack      the same, every pop with autoAck=true (no lease, no ack)
	//   push-<C>x<N>-p<P>[k|M]-<new|existing>  P pre-built partitions (k: ×1000, M: ×1,000,000);
	//                                      pushes to fresh partitions or to the pre-built ones
	//   stream-w<W>-b<B>                   W stream workers, pop batch B, map → window → sink
	// A push, pop or fan-out name may end in -random: its payloads are
	// padded with random characters, which do not compress (RandomPayload).
	Name string `json:"name"`
	// Kind is KindPush, KindPop, KindFanout, KindPartitions or KindStream.
	Kind string `json:"kind"`
	// Producers and Batch: the pushes (the prefill, for pop and fan-out).
	Producers int `json:"producers"`
	Batch     int `json:"batch"`
	// Partitions the items are spread over.
	Partitions int `json:"partitions"`
	// TxIDs is TxIDClient or TxIDMinted.
	TxIDs string `json:"txids"`
	// Groups and Consumers (per group) of pop and fan-out scenarios; a pop
	// scenario has one queue-mode group (Groups 0).
	Groups    int  `json:"groups,omitempty"`
	Consumers int  `json:"consumers,omitempty"`
	PopBatch  int  `json:"pop_batch,omitempty"`
	AutoAck   bool `json:"auto_ack,omitempty"`
	// Prebuilt is the partitions a KindPartitions scenario creates before
	// it measures (p0…p<Prebuilt-1>, also Partitions); FreshPartitions
	// sends every item of it to a new partition instead of to those.
	Prebuilt        int  `json:"prebuilt_partitions,omitempty"`
	FreshPartitions bool `json:"fresh_partitions,omitempty"`
	// Window is a KindStream scenario's tumbling window, in offsets of a
	// source partition.
	Window int `json:"window,omitempty"`
	// RandomPayload: the payloads (the prefill's, for pop and fan-out)
	// are padded with random characters instead of 'x' bytes, so that
	// PostgreSQL's compression of the segments saves nothing (see
	// Config.RandomPayload).
	RandomPayload bool `json:"random_payload,omitempty"`
}

// Connections is the scenario's client connections doing the measured
// work: producers for a push scenario, consumers (all groups) otherwise.
func (s Scenario) Connections() int {
	if s.Kind == KindPush || s.Kind == KindPartitions {
		return s.Producers
	}
	return s.Consumers * max(s.Groups, 1)
}

var (
	pushName   = regexp.MustCompile(`^push-([0-9]+)x([0-9]+)-p([0-9]+)(?:-(client|minted|uuid7))?(-random)?$`)
	popName    = regexp.MustCompile(`^pop-c([0-9]+)-b([0-9]+)(-random)?$`)
	fanoutName = regexp.MustCompile(`^fanout-g([0-9]+)-c([0-9]+)-b([0-9]+)(-autoack)?(-random)?$`)
	partsName  = regexp.MustCompile(`^push-([0-9]+)x([0-9]+)-p([0-9]+)([kM]?)-(new|existing)$`)
	streamName = regexp.MustCompile(`^stream-w([0-9]+)-b([0-9]+)$`)
)

// maxPrebuilt bounds the pre-built partitions of a scenario.
const maxPrebuilt = 10_000_000

// Scenario sets for -scenario.
var (
	// rowScenarios are the rows of the published table.
	rowScenarios = []string{
		"push-8x100-p10", "push-50x100-p1001", "push-50x10-p1001", "push-64x1-p10", "push-16x100-p10000",
		// The push rows again with client keys as Queen's SDKs mint them.
		"push-8x100-p10-uuid7", "push-50x100-p1001-uuid7", "push-50x10-p1001-uuid7", "push-64x1-p10-uuid7",
		"push-16x100-p10000-uuid7",
		"pop-c10-b100", "fanout-g5-c2-b100", "fanout-g5-c2-b100-autoack", "fanout-g5-c10-b100-autoack",
	}
	// sweepScenarios are the points of the plots: 8 connections, items per
	// push 1…1000 over 10 partitions, and 100 items over 1…10,000 partitions.
	sweepScenarios = []string{
		"push-8x1-p10", "push-8x10-p10", "push-8x100-p10", "push-8x1000-p10",
		"push-8x100-p1", "push-8x100-p1000", "push-8x100-p10000",
	}
	// extraScenarios are in all but in neither the table's rows nor the
	// plots: partition lookup and creation on a queue of 1 M partitions,
	// and a stream query.
	extraScenarios = []string{"push-16x100-p1M-new", "push-16x100-p1M-existing", "stream-w4-b100"}
	// randomScenarios are rows of the table again with payloads that do
	// not compress: what PostgreSQL pays when it has to store every byte.
	randomScenarios = []string{
		"push-8x100-p10-minted-random", "push-8x100-p10-uuid7-random", "push-50x10-p1001-minted-random",
		"push-16x100-p10000-minted-random", "pop-c10-b100-random", "fanout-g5-c2-b100-random",
	}
	// smokeScenarios check the tool end to end in CI.
	smokeScenarios = []string{"push-8x100-p10", "push-8x100-p10-uuid7", "push-64x1-p10-minted", "pop-c10-b100", "fanout-g5-c2-b100", "fanout-g5-c2-b100-autoack", "stream-w4-b100"}
)

// ScenarioSets names the sets ParseScenarios accepts besides single names.
var ScenarioSets = map[string][]string{
	"rows":   rowScenarios,
	"sweep":  sweepScenarios,
	"smoke":  smokeScenarios,
	"random": randomScenarios,
	"all":    slices.Concat(rowScenarios, sweepScenarios, extraScenarios, randomScenarios),
}

// ParseScenarios turns a comma-separated list of scenario names and set
// names (rows, sweep, smoke, random, all) into scenarios, in order, each
// once. A push name without its -client/-minted suffix (before any
// -random) expands to the variants
// txids says (TxIDClient, TxIDMinted or TxIDBoth; TxIDUUID7 the UUIDv7
// one); a set's push name with a suffix is left out when txids names one
// other variant, and a name given on its own always stands. Errors wrap
// ErrConfig.
func ParseScenarios(list, txids string) ([]Scenario, error) {
	var variants []string
	switch txids {
	case TxIDClient, TxIDMinted, TxIDUUID7:
		variants = []string{txids}
	case TxIDBoth, "":
		variants = []string{TxIDMinted, TxIDClient}
	default:
		return nil, fmt.Errorf("%w: -txid %q: want client, minted, uuid7 or both", ErrConfig, txids)
	}
	var out []Scenario
	seen := map[string]bool{}
	add := func(s Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		names, set := ScenarioSets[item]
		if !set {
			names = []string{item}
		}
		for _, name := range names {
			m := pushName.FindStringSubmatch(name)
			if set && m != nil && m[4] != "" && len(variants) == 1 && m[4] != variants[0] {
				continue // a set's push row of another id variant than -txid asks for
			}
			if m != nil && m[4] == "" {
				for _, v := range variants {
					s, err := ParseScenario(strings.TrimSuffix(name, m[5]) + "-" + v + m[5])
					if err != nil {
						return nil, err
					}
					add(s)
				}
				continue
			}
			s, err := ParseScenario(name)
			if err != nil {
				return nil, err
			}
			add(s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no scenario named", ErrConfig)
	}
	return out, nil
}

// ParseScenario reads one scenario name (see Scenario.Name); a push name
// must carry its -client or -minted suffix. Errors wrap ErrConfig.
func ParseScenario(name string) (Scenario, error) {
	bad := func(why string) (Scenario, error) {
		return Scenario{}, fmt.Errorf("%w: scenario %q: %s", ErrConfig, name, why)
	}
	nums := func(m []string) ([]int, bool) {
		out := make([]int, 0, len(m))
		for _, s := range m {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1_000_000 {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	if m := pushName.FindStringSubmatch(name); m != nil {
		n, ok := nums(m[1:4])
		if !ok {
			return bad("numbers must be 1..1000000")
		}
		if m[4] == "" {
			return bad("a push scenario needs -client, -minted or -uuid7")
		}
		return Scenario{Name: name, Kind: KindPush, Producers: n[0], Batch: n[1], Partitions: n[2], TxIDs: m[4],
			RandomPayload: m[5] != ""}, nil
	}
	if m := popName.FindStringSubmatch(name); m != nil {
		n, ok := nums(m[1:3])
		if !ok || n[1] > MaxPopBatch {
			return bad(fmt.Sprintf("consumers must be at least 1, batch 1..%d", MaxPopBatch))
		}
		return Scenario{Name: name, Kind: KindPop, Producers: prefillProducers, Batch: prefillBatch, Partitions: DefaultPartitions,
			TxIDs: TxIDMinted, Consumers: n[0], PopBatch: n[1], AutoAck: true, RandomPayload: m[3] != ""}, nil
	}
	if m := fanoutName.FindStringSubmatch(name); m != nil {
		n, ok := nums(m[1:4])
		if !ok || n[2] > MaxPopBatch {
			return bad(fmt.Sprintf("groups and consumers must be at least 1, batch 1..%d", MaxPopBatch))
		}
		return Scenario{Name: name, Kind: KindFanout, Producers: prefillProducers, Batch: prefillBatch, Partitions: DefaultPartitions,
			TxIDs: TxIDMinted, Groups: n[0], Consumers: n[1], PopBatch: n[2], AutoAck: m[4] != "", RandomPayload: m[5] != ""}, nil
	}
	if m := partsName.FindStringSubmatch(name); m != nil {
		n, ok := nums(m[1:4])
		if !ok {
			return bad("numbers must be 1..1000000")
		}
		p := n[2] * map[string]int{"": 1, "k": 1000, "M": 1_000_000}[m[4]]
		if p > maxPrebuilt {
			return bad(fmt.Sprintf("at most %d pre-built partitions", maxPrebuilt))
		}
		return Scenario{Name: name, Kind: KindPartitions, Producers: n[0], Batch: n[1], Partitions: p, TxIDs: TxIDMinted,
			Prebuilt: p, FreshPartitions: m[5] == "new"}, nil
	}
	if m := streamName.FindStringSubmatch(name); m != nil {
		n, ok := nums(m[1:3])
		if !ok || n[1] > MaxPopBatch {
			return bad(fmt.Sprintf("workers must be at least 1, batch 1..%d", MaxPopBatch))
		}
		return Scenario{Name: name, Kind: KindStream, Producers: streamProducers, Batch: streamBatch, Partitions: streamPartitions,
			TxIDs: TxIDMinted, Consumers: n[0], PopBatch: n[1], Window: streamWindow}, nil
	}
	return bad("unknown; want push-<C>x<N>-p<P>[-client|-minted|-uuid7][-random], pop-c<C>-b<B>[-random], " +
		"fanout-g<G>-c<C>-b<B>[-autoack][-random], push-<C>x<N>-p<P>[k|M]-<new|existing>, stream-w<W>-b<B> " +
		"or a set: rows, sweep, smoke, random, all")
}
