package pg

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// QueueOptions are every Queen queue option, with units. Configure stores
// all of them: /configure is a full replace (docs/api.md, "Queues";
// docs/push.md, "Dedup").
type QueueOptions struct {
	LeaseTime                 int  `json:"leaseTime"`                 // seconds, default 300
	RetryLimit                int  `json:"retryLimit"`                // default 3
	DelayedProcessing         int  `json:"delayedProcessing"`         // seconds, default 0
	WindowBuffer              int  `json:"windowBuffer"`              // seconds, default 0
	RetentionEnabled          bool `json:"retentionEnabled"`          // default false
	RetentionSeconds          int  `json:"retentionSeconds"`          // seconds, default 0
	CompletedRetentionSeconds int  `json:"completedRetentionSeconds"` // seconds, default 0
	MaxWaitTimeSeconds        int  `json:"maxWaitTimeSeconds"`        // seconds, default 0
	EncryptionEnabled         bool `json:"encryptionEnabled"`         // default false
	Priority                  int  `json:"priority"`                  // default 0
	MaxSize                   int  `json:"maxSize"`                   // default 0
	RetryDelay                int  `json:"retryDelay"`                // milliseconds, default 1000
	TTL                       int  `json:"ttl"`                       // seconds, default 3600
	DeadLetterQueue           bool `json:"deadLetterQueue"`           // default false
	DLQAfterMaxRetries        bool `json:"dlqAfterMaxRetries"`        // default false
	DedupWindowSeconds        int  `json:"dedupWindowSeconds"`        // seconds, default 3600, 0 = dedup off
}

// DefaultQueueOptions returns the options a queue gets when /configure
// omits them or when a push creates the queue.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{LeaseTime: 300, RetryLimit: 3, RetryDelay: 1000, TTL: 3600, DedupWindowSeconds: 3600}
}

// ConfigureResult is what ConfigureQueue stored.
type ConfigureResult struct {
	QueueID     uuid.UUID
	PartitionID uuid.UUID // the Default partition
	Namespace   string    // as stored: named, kept or derived
	Task        string    // as stored: named, kept or derived
	Options     QueueOptions
}

// ConfigureQueue upserts queue with exactly the options o (a full
// replace: POST /api/v1/configure, docs/api.md "Queues") and ensures its
// partition defaultPartition exists. namespace and task are set when not
// nil ("" included: that clears one); a nil one keeps what an existing
// queue has, and a new queue gets what a push creating it would
// (derivedNamespaceSQL, derivedTaskSQL), so that a configure naming only
// options does not move a queue out of its namespace. The result holds
// what was stored.
func (s *Store) ConfigureQueue(ctx context.Context, queue string, namespace, task *string, defaultPartition string,
	o QueueOptions) (*ConfigureResult, error) {
	res := &ConfigureResult{Options: o}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO queen.queues AS q (name, namespace, task, lease_time, retry_limit,
			delayed_processing, window_buffer, retention_enabled, retention_seconds, completed_retention_seconds,
			max_wait_time_seconds, encryption_enabled, priority, max_size, retry_delay, ttl, dead_letter_queue,
			dlq_after_max_retries, dedup_window_seconds)
			VALUES ($1, coalesce($2::text, `+derivedNamespaceSQL("$1::text")+`), coalesce($3::text, `+derivedTaskSQL("$1::text")+`),
				$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)
			ON CONFLICT (name) DO UPDATE SET namespace = coalesce($2::text, q.namespace), task = coalesce($3::text, q.task),
			lease_time = excluded.lease_time, retry_limit = excluded.retry_limit,
			delayed_processing = excluded.delayed_processing, window_buffer = excluded.window_buffer,
			retention_enabled = excluded.retention_enabled, retention_seconds = excluded.retention_seconds,
			completed_retention_seconds = excluded.completed_retention_seconds,
			max_wait_time_seconds = excluded.max_wait_time_seconds, encryption_enabled = excluded.encryption_enabled,
			priority = excluded.priority, max_size = excluded.max_size, retry_delay = excluded.retry_delay,
			ttl = excluded.ttl, dead_letter_queue = excluded.dead_letter_queue,
			dlq_after_max_retries = excluded.dlq_after_max_retries,
			dedup_window_seconds = excluded.dedup_window_seconds, updated_at = now()
			RETURNING q.id, q.namespace, q.task`,
			queue, namespace, task, o.LeaseTime, o.RetryLimit, o.DelayedProcessing, o.WindowBuffer,
			o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds, o.MaxWaitTimeSeconds,
			o.EncryptionEnabled, o.Priority, o.MaxSize, o.RetryDelay, o.TTL, o.DeadLetterQueue,
			o.DLQAfterMaxRetries, o.DedupWindowSeconds).Scan(&res.QueueID, &res.Namespace, &res.Task)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO queen.partitions (queue_id, name) VALUES ($1, $2)
			ON CONFLICT (queue_id, name) DO NOTHING`, res.QueueID, defaultPartition); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT id FROM queen.partitions WHERE queue_id = $1 AND name = $2`,
			res.QueueID, defaultPartition).Scan(&res.PartitionID)
	})
	if err != nil {
		return nil, fmt.Errorf("pg: configure %q: %w", queue, err)
	}
	return res, nil
}
