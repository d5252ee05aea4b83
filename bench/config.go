package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Defaults for Config.
const (
	// DefaultURL is the broker's base URL.
	DefaultURL = "http://127.0.0.1:6632"
	// DefaultProducers is the number of concurrent producer goroutines.
	DefaultProducers = 1
	// DefaultBatch is the number of items per push.
	DefaultBatch = 1
	// DefaultPartitions is the number of partitions items are spread over.
	DefaultPartitions = 10
	// DefaultPayloadBytes is the size of each item's payload, in bytes.
	DefaultPayloadBytes = 256
	// DefaultDuration is how long producers keep pushing.
	DefaultDuration = 10 * time.Second
	// DefaultRequestTimeout bounds one push request (the broker may hold a
	// push up to its verdict timeout, 5 s by default).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultVerifyTimeout is how long Verify waits for items to land.
	DefaultVerifyTimeout = 60 * time.Second
	// DefaultGroups is the number of named consumer groups.
	DefaultGroups = 1
	// DefaultPopBatch is the most messages one pop asks for.
	DefaultPopBatch = 100
	// MaxPopBatch is the largest pop batch the broker honours (it clamps
	// larger ones silently).
	MaxPopBatch = 10000
	// DefaultDrainTimeout is how long consumers keep popping after the
	// producers stop.
	DefaultDrainTimeout = 60 * time.Second
)

// ErrConfig is returned (wrapped) by Run for an invalid Config.
var ErrConfig = errors.New("bench: invalid config")

// ErrBrokerUnhealthy is returned (wrapped) by Run when the broker's
// GET /health does not answer 200 before the load starts.
var ErrBrokerUnhealthy = errors.New("bench: broker not healthy")

// Config of a run. Zero fields take the defaults above.
type Config struct {
	// URL is the broker's base URL, http or https (default DefaultURL).
	URL string
	// Queue is the queue pushed to (default "bench-<RunID>"). With
	// MintedIDs it must hold no messages but the run's.
	Queue string
	// RunID tags every transactionId of the run; letters and digits only
	// (default derived from the start time, unique per run).
	RunID string
	// Producers is the number of concurrent producers (default DefaultProducers).
	Producers int
	// Batch is the number of items per push (default DefaultBatch).
	Batch int
	// MintedIDs sends items without a transactionId, so the broker mints
	// each one's (its message id) and no client id is deduplicated; the
	// run's messages are then traced by their payload (see the package
	// documentation). Default false: every item carries "<run>-<p>-<seq>".
	MintedIDs bool
	// UUID7IDs sends every item's client transactionId as the lowercase
	// text of a version-7 UUID minted at send time, the form Queen's SDKs
	// send (appendUUID7TxID), instead of "<run>-<p>-<seq>". Ignored with
	// MintedIDs.
	UUID7IDs bool
	// Partitions is the number of partitions, named p0..pN-1 (default
	// DefaultPartitions).
	Partitions int
	// FreshPartitions sends every item to a partition of its own that no
	// item used before: item seq of producer p goes to partition
	// "p<Partitions + seq·Producers + p>", so p0…p<Partitions-1> (which a
	// caller may have pre-built) are never used and every item makes the
	// broker create a partition.
	FreshPartitions bool
	// PayloadBytes is each payload's size in bytes (default DefaultPayloadBytes).
	PayloadBytes int
	// RandomPayload pads every payload with random characters, which do
	// not compress, instead of 'x' bytes, which compress about tenfold in
	// PostgreSQL's segments (see payloadShape). Default false.
	RandomPayload bool
	// Duration is how long producers keep starting requests (default
	// DefaultDuration). Requests in flight at the end are completed.
	Duration time.Duration
	// RequestTimeout bounds one request (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// BrokerPID, when non-zero, is the broker's process id on this host;
	// its peak RSS (VmHWM) is read at the end of the run.
	BrokerPID int

	// Consumers is the number of consumer goroutines per consumer group
	// (default 0: no consumers, the run only pushes).
	Consumers int
	// Groups is the number of named consumer groups, bench-g0 …
	// bench-g<Groups-1>; each gets every message (fan-out). Default
	// DefaultGroups; ignored with QueueMode.
	Groups int
	// QueueMode makes the consumers one queue-mode group instead of named
	// groups: pops carry no consumerGroup and the consumers compete.
	QueueMode bool
	// PopBatch is the most messages one pop asks for (default
	// DefaultPopBatch, at most MaxPopBatch).
	PopBatch int
	// AutoAck pops with autoAck=true instead of acknowledging each popped
	// batch with POST /api/v1/ack/batch.
	AutoAck bool
	// DrainTimeout is how long consumers keep popping after the producers
	// stop, until every group has every accepted message (default
	// DefaultDrainTimeout). With Prefill it bounds the whole consume phase.
	DrainTimeout time.Duration
	// Prefill starts the consumers only after the producers have stopped
	// (and AfterPrefill has returned): they drain a deep queue instead of
	// following the producers, and the consume figures cover that drain
	// alone.
	Prefill bool
	// AfterPrefill, when set, is called with Prefill between the producers'
	// end and the consumers' start; Run returns its error. The scenario
	// runner waits there for the projector to catch up and samples CPU.
	AfterPrefill func(ctx context.Context) error
}

func (c Config) withDefaults(now time.Time) Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.RunID == "" {
		c.RunID = "r" + strconv.FormatInt(now.UnixNano(), 36)
	}
	if c.Queue == "" {
		c.Queue = "bench-" + c.RunID
	}
	if c.Producers == 0 {
		c.Producers = DefaultProducers
	}
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.PayloadBytes == 0 {
		c.PayloadBytes = DefaultPayloadBytes
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Groups == 0 {
		c.Groups = DefaultGroups
	}
	if c.PopBatch == 0 {
		c.PopBatch = DefaultPopBatch
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	return c
}

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return bad("url: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("url %q: scheme must be http or https", c.URL)
	case u.Host == "":
		return bad("url %q: no host", c.URL)
	case c.Producers < 0, c.Batch < 0, c.Partitions < 0, c.PayloadBytes < 0:
		return bad("producers, batch, partitions and payload must be positive")
	case c.Duration < 0, c.RequestTimeout < 0, c.DrainTimeout < 0:
		return bad("durations must be positive")
	case c.Consumers < 0, c.Groups < 0:
		return bad("consumers and groups must be positive")
	case c.PopBatch < 0 || c.PopBatch > MaxPopBatch:
		return bad("pop batch %d: must be 1..%d", c.PopBatch, MaxPopBatch)
	case c.UUID7IDs && !c.MintedIDs && c.Producers > maxUUID7Producers:
		return bad("%d producers: UUIDv7 transactionIds hold at most %d", c.Producers, maxUUID7Producers)
	}
	for _, r := range c.RunID {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return bad("run id %q: letters and digits only", c.RunID)
		}
	}
	return nil
}

// groupNames are the consumerGroup parameters of the run's consumer
// groups: "" (none) for the one queue-mode group, else bench-g0, bench-g1, …
func (c Config) groupNames() []string {
	if c.QueueMode {
		return []string{""}
	}
	names := make([]string, c.Groups)
	for i := range names {
		names[i] = groupPrefix + strconv.Itoa(i)
	}
	return names
}

// payloadShape is how the run makes its payloads.
func (c Config) payloadShape() payloadShape {
	return payloadShape{bytes: c.PayloadBytes, random: c.RandomPayload}
}
