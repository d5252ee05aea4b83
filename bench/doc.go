// Package bench is a load generator and end-to-end checker for the push
// route (POST /api/v1/push) of a Queen-compatible broker and, with
// consumers, for its consume routes (GET /api/v1/pop/queue/{queue},
// POST /api/v1/ack/batch).
//
// # Load
//
// Run starts Config.Producers goroutines. Each loops for Config.Duration:
// it builds one push of Config.Batch items, sends it, waits for the answer
// and records the request's latency (request written → response read) and
// each item's status. Producers are closed-loop: one request in flight
// each. Nothing is ever retried, so every transactionId is sent once.
//
// # Items
//
// Item number seq (0, 1, 2, ... per producer) of producer p in run r has
//
//	transactionId  "<r>-<p>-<seq>"          r never contains '-'
//	partition      "p<(p+seq) mod Partitions>"  round-robin, staggered by producer
//	payload        {"p":<p>,"s":<seq>,"pad":"xxx…"}  padded to PayloadBytes
//	               (longer only when the fixed part alone exceeds it)
//
// so that every stored message of the run can be traced back to its
// producer and sequence number, and its partition and payload recomputed.
// With Config.MintedIDs the items carry no transactionId: the broker mints
// each one's (its message id), and messages are traced by the producer and
// sequence number their payload starts with; the run's queue (named after
// the run) then holds only the run's messages.
// In runs with consumers the payload also carries the send time of its
// request, for end-to-end latency:
//
//	payload        {"p":<p>,"s":<seq>,"t":<unix ns>,"pad":"xxx…"}
//
// where <unix ns> is the wall clock just before the request is written,
// right-aligned in 19 bytes (leading spaces are JSON whitespace), so the
// payload is still PayloadBytes long. The Ledger keeps each request's send
// time, so the payload can still be recomputed byte for byte. With
// Config.RandomPayload (scenarios ending -random) the pad is base64url
// characters drawn from a generator seeded by (p, seq) instead of 'x'
// bytes: the same recomputation, but nothing for PostgreSQL's compression
// to shrink.
//
// # Outcomes
//
// Each item ends as one Outcome: the status the broker answered (queued,
// duplicate, buffered, failed), or Unknown when its request got no usable
// answer (transport error, a status other than 201, or a body that does not
// match the request item for item). Unknown items may or may not be stored.
//
// # Verification
//
// Verify reads the queue back from PostgreSQL and, considering only
// messages whose transactionId carries this run's id, checks:
//
//   - every item answered queued or buffered is stored (Verify polls until
//     it is, or until its timeout);
//   - no item of the run is stored more than once (transactionId within its
//     partition), whatever its outcome;
//   - no item answered failed is stored;
//   - no item answered duplicate exists (the run never repeats a
//     transactionId, so a duplicate verdict is wrong by construction);
//   - every stored message sits in the partition its item was sent to, with
//     its payload byte-for-byte, and was actually sent;
//   - within each partition, each producer's sequence numbers increase with
//     the offset (per-producer send order is kept);
//   - with minted ids, every stored transactionId is the message's id.
//
// # Consumers
//
// With Config.Consumers, Run starts that many consumers per consumer
// group before the producers: Config.Groups named groups bench-g0,
// bench-g1, … (each gets every message: fan-out), or with
// Config.QueueMode one queue-mode group (no consumerGroup parameter: the
// consumers compete for messages). Each consumer loops on the wildcard
// long poll
//
//	GET /api/v1/pop/queue/<queue>?batch=<PopBatch>&wait=true&timeout=1000[&consumerGroup=<g>][&autoAck=true]
//
// and acknowledges every popped batch as completed with one POST
// /api/v1/ack/batch (unless Config.AutoAck). Per pop it records the pop's
// latency (pops that delivered only) and per message the end-to-end
// latency: the time the pop's answer was read minus the send time in the
// payload (one host clock, so no skew).
//
// When the producers stop, the consumers drain: a consumer stops at its
// first empty pop once its group has received every item answered queued
// or buffered, or when Config.DrainTimeout has passed.
//
// Each group's deliveries are then checked against the Ledger:
//
//   - every item answered queued or buffered is delivered exactly once
//     (missing and duplicates are counted per group);
//   - no item answered failed, and nothing never sent, is delivered;
//   - every message comes from the partition its item was sent to, with
//     its payload byte for byte;
//   - within each partition, each producer's sequence numbers arrive in
//     increasing order. Arrival order is the order the group's consumers
//     received their pops, recorded before the ack; without autoAck the
//     broker cannot hand out a partition's next batch to the group before
//     that ack, so arrival order is delivery order. With autoAck and
//     several consumers per group it is not, and the order is checked in
//     offset order instead. A repeated delivery counts as a duplicate
//     only;
//   - every ack is confirmed (success true).
//
// With Config.Prefill the consumers start only after the producers have
// stopped: they drain a deep queue, and the consume figures cover the
// drain alone.
//
// # Scenarios
//
// RunScenario runs one named Scenario (ParseScenario, ParseScenarios) on a
// Stack of its own: a fresh PostgreSQL cluster (initdb into a temporary
// directory, durable: fsync, synchronous_commit and full_page_writes on,
// unless StackConfig.NonDurable) or a fresh database on a given server, and
// a fresh broker process with an empty WAL directory, started from the
// broker binary as a child of the bench so that /proc can be read:
//
//	push-<C>x<N>-p<P>-<client|minted>  C producers × N items per push over P partitions
//	pop-c<C>-b<B>                      C queue-mode consumers, autoAck, batch B, draining a pre-filled queue
//	fanout-g<G>-c<C>-b<B>              G named groups × C consumers, batch B, ack/batch, each reading everything
//	fanout-g<G>-c<C>-b<B>-autoack      the same with autoAck=true pops (no lease, no ack/batch)
//	push-<C>x<N>-p<P>[k|M]-new         a queue pre-built with P partitions; every item to a new partition
//	push-<C>x<N>-p<P>[k|M]-existing    the same queue; items round-robin over the pre-built partitions
//	stream-w<W>-b<B>                   W stream workers, pop batch B, map → tumbling window → sink
//
// Pop and fan-out scenarios pre-fill their queue with 8 producers × 100
// items (minted ids) over 10 partitions for the run's duration, wait until
// the projector has all of it in PostgreSQL, then measure the drain.
//
// A many-partitions scenario (KindPartitions) creates its queue with POST
// /api/v1/configure, inserts partitions p0…p<P-1> into queen.partitions
// with one INSERT … SELECT from generate_series, runs ANALYZE on the table
// and a CHECKPOINT, all before the measured phase (40–75 s for 1 M on a
// durable cluster of a busy 2-core machine). Then C producers × N items
// push (broker-minted ids) for the duration: with -new, item seq of
// producer p goes to partition p<P + seq·C + p>, which does not exist, so
// every item makes the projector create a partition; with -existing,
// items go round-robin over the pre-built ones. Besides the push figures
// it reports the partitions created (counted in PostgreSQL after the
// catch-up: one per accepted item with -new, none with -existing, else
// verification fails) and creations per second of push wall time.
//
// A stream scenario (KindStream) configures a source and a sink queue,
// registers a query (POST /streams/v1/queries), and starts W stream
// workers before 4 producers × 100 events (minted ids) over 10 source
// partitions push for the duration. Each worker loops: a long-poll pop of
// the source with the query's consumer group (streams.<query>, batch B);
// POST /streams/v1/state/get of the partition's open windows; map: read
// each event's producer and sequence number from its payload and derive
// its value; window: tumbling over the partition's offsets,
// 250 offsets wide (window k holds offsets 250k … 250k+249, closed by
// its last offset); then one POST /streams/v1/cycle: an upsert of each
// open window's aggregate {window, windowStart, windowEnd, count, sum},
// a delete and a sink push (no transactionId: the broker derives it) of
// each window closed, and the ack of the batch, releasing the lease. The
// workers stop when every event answered queued or buffered is committed.
// Its figures: events per second and cycles per second from the
// producers' start to the last committed cycle, p50/p99 of the cycle
// request, and CPU per event over that phase (the pushes of the events
// included). Its exactly-once check, from PostgreSQL at the end: the
// counts and sums of the open windows' state rows plus those of the
// closed windows in the sink equal the accepted events' count and sum of
// values; no two sink messages share a (partition, transactionId), no
// window is in the sink twice, and every closed window holds all its
// offsets; and by the workers' own record, every accepted event was
// committed by exactly one cycle. The source queue is verified as a push
// run's queue is.
//
// The measured phase of a push scenario runs from just before the first
// push until the projector backlog (queen_projector_backlog on the
// broker's /metrics) is zero after the last answer, so that the CPU of
// projecting what was accepted is counted; of a pop or fan-out scenario,
// from the end of the prefill to the end of the drain. Over that phase a
// ScenarioResult records:
//
//   - msg/s: accepted items (push) or deliveries, all groups (pop, fan-out);
//   - the push answers by status: queued, buffered (the projector fell
//     behind the verdict timeout), duplicate, failed; the peak projector
//     backlog sampled every 250 ms and the catch-up time after the last
//     answer;
//   - p50, p99, p99.9 of push requests, or of pops that delivered;
//   - the broker's peak RSS: VmHWM from /proc/<pid>/status at the end;
//   - CPU seconds (user + system, /proc/<pid>/stat, USER_HZ 100): of the
//     broker process, and of PostgreSQL as its postmaster, every live child,
//     and (through the postmaster's cutime and cstime) every child that
//     exited, sampled before and after; divided by the messages, in µs;
//   - PostgreSQL bytes: pg_total_relation_size of queen.segments and
//     the dedup sidecar (queen.dedup_batches and queen.dedup, partitions
//     included) per stored message, and the two
//     less the payload size;
//   - the verification above, of the stored queue and of what every group
//     received;
//   - the machine, the commit, PostgreSQL's version and settings (a result
//     whose server has fsync, full_page_writes or synchronous_commit off is
//     marked non-durable).
//
// WriteMarkdown turns results into the published report, one table row per
// scenario, and WritePlots draws throughput and CPU per message against
// items per push and against partitions from the sweep scenarios.
package bench
