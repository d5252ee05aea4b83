// Package bench is a load generator and end-to-end checker for the push
// route (POST /api/v1/push) of a Queen-compatible broker.
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
package bench
