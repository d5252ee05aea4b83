// Package pg owns the PostgreSQL side of the broker: the embedded schema
// (schema.sql, applied idempotently on start) and every query: push
// projection with dedup (project.go), configure, system state and the reads
// used by tools and tests.
package pg

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queenmq/queen-go/crypt"
)

//go:embed schema.sql
var schemaSQL string

// schemaLockKey serialises schema application between brokers.
const schemaLockKey = 7370010001

// Defaults for Config.
const (
	// DefaultPoolSize is the number of pooled connections.
	DefaultPoolSize = 10
	// DefaultConnectTimeout bounds one connection attempt.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultMaxPopBytes is QUEEN_MAX_POP_BYTES' default: 16 MiB of
	// messages per pop answer (Config.MaxPopBytes).
	DefaultMaxPopBytes = 16 << 20
)

// Config for Open. Zero fields take the defaults above.
type Config struct {
	// URL is a libpq-style connection string or postgres:// URL.
	URL string
	// PoolSize is the maximum number of connections (default DefaultPoolSize).
	PoolSize int32
	// ConnectTimeout bounds each connection attempt (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// EncryptionKey encrypts the payloads of queues with encryptionEnabled
	// (AES-256-GCM, Queen's envelope); nil stores them in plaintext with a
	// warning, as Queen does.
	EncryptionKey *crypt.Key
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// PlainSegments stores segment bodies as they are (version 1) instead
	// of compressing them (version 2, pg/segment.go): for a rolling
	// upgrade from a broker that cannot read compressed bodies
	// (QUEEN_SEGMENT_COMPRESSION=false). Reading takes both either way.
	PlainSegments bool
	// MaxPopBytes bounds the messages one pop delivers, in bytes of their
	// stored form (payload, ids and times; default DefaultMaxPopBytes,
	// QUEEN_MAX_POP_BYTES): a pop stops at the segment that reaches it,
	// and delivers at least one message however large (boundedTakeSQL,
	// docs/consume.md "How much one pop returns").
	MaxPopBytes int64
}

// Store is the broker's handle on PostgreSQL. Safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	key         *crypt.Key
	log         *slog.Logger
	warnedNoKey sync.Once
	// plainSegments: Config.PlainSegments.
	plainSegments bool
	// maxPopBytes: Config.MaxPopBytes, the default of PopRequest.MaxBytes.
	maxPopBytes int64

	mu       sync.Mutex
	partIDs  *partIDCache // (queue, partition) → partition id, bounded (pg/partcache.go)
	schemaOK bool
	// offsets: partition id → its next offset and queue encryption as of
	// this Store's last committed projection batch, or as its lookup for
	// a projection batch read them where it has not committed to it yet
	// (pg/project.go, projectPredicted, partitionIDs); created on first use.
	offsets map[uuid.UUID]offsetGuess
	// predicted counts the batches projectPredicted committed and those
	// it sent but rolled back (a stale prediction or a known key).
	predicted, predictedMiss atomic.Int64
	// ticks: this Store's committed sidecar rows with client keys stored
	// under tick keys, for projectPredicted (pg/tickcache.go).
	ticks tickCache

	// legacyDedup: older versions' sidecar tables hold entries (exact
	// entries in queen.dedup, or rows of queen.dedup_runs: legacyRuns), so
	// every client key is probed there too (pg/dedup.go).
	legacyDedup, legacyRuns atomic.Bool
	// unmarkedRows: queen.dedup_batches may hold rows of an earlier layout
	// (layout NULL, refreshLegacy; set again when assert_tick_rows finds
	// one): a predicted batch then probes minted-form keys by keyHash and
	// mintedPartKey as well (buildPredicted).
	unmarkedRows atomic.Bool

	// leases remembers the transactionIds of the leases this broker
	// handed out, so that an ack need not read them back (pg/fastack.go).
	leases *leaseMemo

	// combine queues concurrent autoAck pops to serve them in one
	// transaction (pg/popcombine.go).
	combine popCombiner
	// ackCombine does the same for whole-lease acks (pg/ackcombine.go).
	ackCombine ackCombiner

	// prepareTurns bounds the PreparePartitions calls that create at
	// once (pg/prepare.go).
	prepareTurns chan struct{}
	// prepare combines concurrent PreparePartitions calls (pg/prepare.go).
	prepare prepareCombiner
	// projectorLookups counts the (queue, partition) pairs projection
	// batches looked up (or created) because the cache lacked them.
	projectorLookups atomic.Int64
}

type partKey struct{ queue, partition string }

// Open creates the pool. It does not connect: the broker must start while
// PostgreSQL is away (docs/operations.md, "What a broker needs"). Errors
// only for a malformed URL.
func Open(cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("pg: parse url: %w", err)
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.MaxPopBytes <= 0 {
		cfg.MaxPopBytes = DefaultMaxPopBytes
	}
	pc.MaxConns = cfg.PoolSize
	pc.MinConns = 0
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pc.HealthCheckPeriod = 5 * time.Second
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerFastArrays(c.TypeMap()) // pg/pgarray.go
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("pg: pool: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Store{pool: pool, key: cfg.EncryptionKey, log: cfg.Logger, partIDs: newPartIDCache(maxPartitionIDs),
		leases: newLeaseMemo(DefaultLeaseMemoBytes), plainSegments: cfg.PlainSegments,
		maxPopBytes: cfg.MaxPopBytes, prepareTurns: make(chan struct{}, prepareCreators)}, nil
}

// Pool exposes the pool for tools and tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping does a real round-trip (SELECT 1).
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// EnsureSchema applies schema.sql once per Store (again after a failure).
// Safe to call from several brokers at once: an advisory lock serialises it.
func (s *Store) EnsureSchema(ctx context.Context) error {
	s.mu.Lock()
	ok := s.schemaOK
	s.mu.Unlock()
	if ok {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockKey)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, schemaSQL); err != nil {
			return err
		}
		return s.refreshLegacy(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("pg: apply schema: %w", err)
	}
	s.mu.Lock()
	s.schemaOK = true
	s.mu.Unlock()
	return nil
}

// Checkpoint is a broker's projection checkpoint: the last WAL index it
// committed and the CRC-32C of that record's payload (HasCRC false for
// rows written before the CRC was recorded). The CRC lets the projector
// tell that its WAL directory is not the one the checkpoint came from
// (restored from an older snapshot, or copied from elsewhere with the
// broker id file): the same index then holds another record, or none.
//
// A record with more items than one projection transaction takes is
// projected in pieces: PartialItems > 0 says that the first PartialItems
// items of record Index+1 are committed as well, and PartialCRC is that
// record's CRC-32C. Every piece's transaction writes the checkpoint with
// its items, so a crash between pieces neither loses nor repeats one.
type Checkpoint struct {
	Index     uint64
	RecordCRC uint32
	HasCRC    bool
	// PartialItems counts the committed items of record Index+1 (0: none).
	PartialItems int
	// PartialCRC is the CRC-32C of record Index+1 (with PartialItems > 0).
	PartialCRC uint32
}

// Checkpoint returns the broker's checkpoint, and false when the broker has
// never committed (a new broker, or a database restored from a backup
// older than its first commit).
func (s *Store) Checkpoint(ctx context.Context, brokerID uuid.UUID) (Checkpoint, bool, error) {
	var idx int64
	var crc, partItems, partCRC *int64
	err := s.pool.QueryRow(ctx, `SELECT wal_index, record_crc32c, CASE WHEN partial_index = wal_index + 1 THEN partial_items END, partial_crc32c
		FROM queen.projector_checkpoints
		WHERE broker_id = $1`, brokerID).Scan(&idx, &crc, &partItems, &partCRC)
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, err
	}
	cp := Checkpoint{Index: uint64(idx)}
	if crc != nil {
		cp.RecordCRC, cp.HasCRC = uint32(*crc), true
	}
	if partItems != nil && *partItems > 0 && partCRC != nil {
		cp.PartialItems, cp.PartialCRC = int(*partItems), uint32(*partCRC)
	}
	return cp, true, nil
}

// GetFlag reads a boolean system flag stored as {"enabled": bool}; false
// when unset.
func (s *Store) GetFlag(ctx context.Context, key string) (bool, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, "SELECT value FROM queen.system_state WHERE key = $1", key).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var v struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, fmt.Errorf("pg: flag %s: %w", key, err)
	}
	return v.Enabled, nil
}

// SetFlag stores a boolean system flag as {"enabled": bool}.
func (s *Store) SetFlag(ctx context.Context, key string, enabled bool) error {
	raw, _ := json.Marshal(map[string]bool{"enabled": enabled})
	_, err := s.pool.Exec(ctx, `INSERT INTO queen.system_state (key, value, updated_at) VALUES ($1, $2, now())
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()`, key, raw)
	return err
}

// StoredMessage is a message read back with its position.
type StoredMessage struct {
	Queue, Partition string
	PartitionID      uuid.UUID
	Offset           int64
	Message
}

// ReadPartition returns every stored message of queue/partition in offset
// order (for tests, verification and tools; not the consume path).
func (s *Store) ReadPartition(ctx context.Context, queue, partition string) ([]StoredMessage, error) {
	return s.readMessages(ctx, `SELECT q.name, p.name, p.id, s.base_offset, s.last_offset, s.body
		FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 AND p.name = $2 ORDER BY s.base_offset`, queue, partition)
}

// ReadQueue returns every stored message of a queue, partition by partition
// in offset order.
func (s *Store) ReadQueue(ctx context.Context, queue string) ([]StoredMessage, error) {
	return s.readMessages(ctx, `SELECT q.name, p.name, p.id, s.base_offset, s.last_offset, s.body
		FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id JOIN queen.queues q ON q.id = p.queue_id
		WHERE q.name = $1 ORDER BY p.name, s.base_offset`, queue)
}

func (s *Store) readMessages(ctx context.Context, sql string, args ...any) ([]StoredMessage, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StoredMessage
	for rows.Next() {
		var q, p string
		var pid uuid.UUID
		var base, last int64
		var body []byte
		if err := rows.Scan(&q, &p, &pid, &base, &last, &body); err != nil {
			return nil, err
		}
		msgs, err := decodeSegmentRange(pid, base, last, body)
		if err != nil {
			return nil, err
		}
		if err := s.decrypt(msgs); err != nil {
			return nil, err
		}
		for i, m := range msgs {
			out = append(out, StoredMessage{Queue: q, Partition: p, PartitionID: pid, Offset: base + int64(i), Message: m})
		}
	}
	return out, rows.Err()
}

// ErrNoKey is returned when an encrypted payload must be read but the
// broker has no QUEEN_ENCRYPTION_KEY.
var ErrNoKey = errors.New("pg: encrypted payload but no encryption key configured")

// decrypt replaces encrypted payloads by their plaintext, in place.
func (s *Store) decrypt(msgs []Message) error {
	for i := range msgs {
		if !msgs[i].Encrypted {
			continue
		}
		if s.key == nil {
			return ErrNoKey
		}
		p, err := s.key.Decrypt(msgs[i].Payload)
		if err != nil {
			return fmt.Errorf("pg: decrypt message %s: %w", msgs[i].ID, err)
		}
		msgs[i].Payload, msgs[i].Encrypted = p, false
	}
	return nil
}

// encrypt replaces payloads by crypt envelopes, in place (a queue with
// encryptionEnabled); without a key it leaves them and warns once.
func (s *Store) encrypt(msgs []Message) error {
	if s.key == nil {
		s.warnedNoKey.Do(func() {
			s.log.Warn("a queue has encryptionEnabled but QUEEN_ENCRYPTION_KEY is not set: payloads are stored in plaintext")
		})
		return nil
	}
	for i := range msgs {
		if msgs[i].Encrypted {
			continue
		}
		env, err := s.key.Encrypt(msgs[i].Payload)
		if err != nil {
			return err
		}
		msgs[i].Payload, msgs[i].Encrypted = env, true
	}
	return nil
}
