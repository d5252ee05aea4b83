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
// In runs with consumers the payload also carries the send time of its
// request, for end-to-end latency:
//
//	payload        {"p":<p>,"s":<seq>,"t":<unix ns>,"pad":"xxx…"}
//
// where <unix ns> is the wall clock just before the request is written,
// right-aligned in 19 bytes (leading spaces are JSON whitespace), so the
// payload is still PayloadBytes long. The Ledger keeps each request's send
// time, so the payload can still be recomputed byte for byte.
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
//     the offset (per-producer send order is kept).
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
package bench
