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

// ConfigureResult is what Configure stored.
type ConfigureResult struct {
	QueueID     uuid.UUID
	PartitionID uuid.UUID // the Default partition
	Namespace   string
	Task        string
	Options     QueueOptions
}

// Configure upserts queue with exactly these options (a full replace) and
// ensures its Default partition exists.
func (s *Store) Configure(ctx context.Context, queue, namespace, task, defaultPartition string, o QueueOptions) (*ConfigureResult, error) {
	res := &ConfigureResult{Namespace: namespace, Task: task, Options: o}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO queen.queues AS q (name, namespace, task, lease_time, retry_limit,
			delayed_processing, window_buffer, retention_enabled, retention_seconds, completed_retention_seconds,
			max_wait_time_seconds, encryption_enabled, priority, max_size, retry_delay, ttl, dead_letter_queue,
			dlq_after_max_retries, dedup_window_seconds)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19)
			ON CONFLICT (name) DO UPDATE SET namespace = excluded.namespace, task = excluded.task,
			lease_time = excluded.lease_time, retry_limit = excluded.retry_limit,
			delayed_processing = excluded.delayed_processing, window_buffer = excluded.window_buffer,
			retention_enabled = excluded.retention_enabled, retention_seconds = excluded.retention_seconds,
			completed_retention_seconds = excluded.completed_retention_seconds,
			max_wait_time_seconds = excluded.max_wait_time_seconds, encryption_enabled = excluded.encryption_enabled,
			priority = excluded.priority, max_size = excluded.max_size, retry_delay = excluded.retry_delay,
			ttl = excluded.ttl, dead_letter_queue = excluded.dead_letter_queue,
			dlq_after_max_retries = excluded.dlq_after_max_retries,
			dedup_window_seconds = excluded.dedup_window_seconds, updated_at = now()
			RETURNING q.id`,
			queue, namespace, task, o.LeaseTime, o.RetryLimit, o.DelayedProcessing, o.WindowBuffer,
			o.RetentionEnabled, o.RetentionSeconds, o.CompletedRetentionSeconds, o.MaxWaitTimeSeconds,
			o.EncryptionEnabled, o.Priority, o.MaxSize, o.RetryDelay, o.TTL, o.DeadLetterQueue,
			o.DLQAfterMaxRetries, o.DedupWindowSeconds).Scan(&res.QueueID)
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
