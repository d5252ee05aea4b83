package bench

import (
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
	// Queue is the queue pushed to (default "bench-<unix seconds>").
	Queue string
	// RunID tags every transactionId of the run; letters and digits only
	// (default derived from the start time, unique per run).
	RunID string
	// Producers is the number of concurrent producers (default DefaultProducers).
	Producers int
	// Batch is the number of items per push (default DefaultBatch).
	Batch int
	// Partitions is the number of partitions, named p0..pN-1 (default
	// DefaultPartitions).
	Partitions int
	// PayloadBytes is each payload's size in bytes (default DefaultPayloadBytes).
	PayloadBytes int
	// Duration is how long producers keep starting requests (default
	// DefaultDuration). Requests in flight at the end are completed.
	Duration time.Duration
	// RequestTimeout bounds one request (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// BrokerPID, when non-zero, is the broker's process id on this host;
	// its peak RSS (VmHWM) is read at the end of the run.
	BrokerPID int
}

func (c Config) withDefaults(now time.Time) Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Queue == "" {
		c.Queue = "bench-" + strconv.FormatInt(now.Unix(), 10)
	}
	if c.RunID == "" {
		c.RunID = "r" + strconv.FormatInt(now.UnixNano(), 36)
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
	case c.Duration < 0, c.RequestTimeout < 0:
		return bad("durations must be positive")
	}
	for _, r := range c.RunID {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return bad("run id %q: letters and digits only", c.RunID)
		}
	}
	return nil
}
