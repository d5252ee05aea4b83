// Time series derived from successive answers of GET /api/v1/system/pipeline.
//
// The broker reports counters (push verdicts, popped messages, acks) and
// cumulative histograms (WAL fsync, projection transaction), as /metrics
// does. A rate is the difference of a counter between two samples divided
// by the seconds between them; an interval's latency is the difference of
// a histogram's sum divided by the difference of its count (the mean), and
// its p99 is estimated from the differences of the buckets, as PromQL's
// histogram_quantile does (linear within the bucket). Counters restart
// with the broker process: a sample whose counters went down, or from
// another broker id, starts a new run (no rate for that step).

/**
 * quantile returns the q-quantile (0..1) of the observations that fell
 * between two snapshots of one histogram ({count, sum, buckets: [{le,
 * count}]}, cumulative, le null = +Inf), or null when there were none.
 */
export function quantile(q, prev, cur) {
  if (!prev || !cur || cur.buckets.length !== prev.buckets.length) return null;
  const total = cur.count - prev.count;
  if (total <= 0) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (let i = 0; i < cur.buckets.length; i++) {
    const b = cur.buckets[i];
    const c = b.count - prev.buckets[i].count;
    if (c >= rank) {
      if (b.le === null) return lowerBound; // in +Inf: the highest finite bound
      if (c === lowerCount) return b.le;
      return lowerBound + (b.le - lowerBound) * (rank - lowerCount) / (c - lowerCount);
    }
    if (b.le !== null) lowerBound = b.le;
    lowerCount = c;
  }
  return lowerBound;
}

function mean(prev, cur) {
  if (!prev || !cur) return null;
  const n = cur.count - prev.count;
  return n > 0 ? (cur.sum - prev.sum) / n : null;
}

function sum(obj, keys) {
  let s = 0;
  for (const k of keys) s += (obj && obj[k]) || 0;
  return s;
}

/** History keeps the last max samples of the pipeline status and the series derived from them. */
export class History {
  constructor(max) {
    this.max = max;
    this.samples = [];
  }

  /** add takes one pipeline status (the JSON of /api/v1/system/pipeline). */
  add(p) {
    const m = p.metrics;
    const s = {
      t: Date.parse(p.time) / 1000,
      broker: p.brokerId,
      pushed: sum(m.pushItems, ['queued', 'buffered']),
      duplicates: sum(m.pushItems, ['duplicate']),
      failed: sum(m.pushItems, ['failed']),
      popped: m.popped,
      acked: sum(m.acks, ['ok']),
      fsync: m.walFsyncSeconds,
      batch: m.projectorBatchSeconds,
      backlog: p.projector.backlog,
      lag: p.projector.lagSeconds,
      walBytes: p.wal.bytes,
      walRecords: p.wal.records,
      pushRate: null, popRate: null, ackRate: null, dupRate: null,
      fsyncMeanMs: null, fsyncP99Ms: null, batchMeanMs: null, batchP99Ms: null,
    };
    const prev = this.samples[this.samples.length - 1];
    if (prev && s.t <= prev.t) return null; // same or older answer
    if (prev && prev.broker === s.broker && s.pushed >= prev.pushed && s.popped >= prev.popped
        && s.fsync.count >= prev.fsync.count && s.batch.count >= prev.batch.count) {
      const dt = s.t - prev.t;
      s.pushRate = (s.pushed - prev.pushed) / dt;
      s.dupRate = (s.duplicates - prev.duplicates) / dt;
      s.popRate = (s.popped - prev.popped) / dt;
      s.ackRate = (s.acked - prev.acked) / dt;
      const ms = (v) => (v === null ? null : v * 1000);
      s.fsyncMeanMs = ms(mean(prev.fsync, s.fsync));
      s.fsyncP99Ms = ms(quantile(0.99, prev.fsync, s.fsync));
      s.batchMeanMs = ms(mean(prev.batch, s.batch));
      s.batchP99Ms = ms(quantile(0.99, prev.batch, s.batch));
    }
    this.samples.push(s);
    if (this.samples.length > this.max) this.samples.splice(0, this.samples.length - this.max);
    return s;
  }

  last() {
    return this.samples[this.samples.length - 1] || null;
  }

  /** lastWith returns the newest sample whose key is not null. */
  lastWith(key) {
    for (let i = this.samples.length - 1; i >= 0; i--) {
      if (this.samples[i][key] !== null && this.samples[i][key] !== undefined) return this.samples[i];
    }
    return null;
  }

  /** columns returns uPlot's data: [times, series of each key]. */
  columns(keys) {
    const out = [this.samples.map((s) => s.t)];
    for (const k of keys) out.push(this.samples.map((s) => (s[k] === undefined ? null : s[k])));
    return out;
  }
}
