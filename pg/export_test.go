package pg

import (
	"time"

	"github.com/google/uuid"
)

// SetKeyHash replaces the sidecar's key hash (to force collisions) and
// returns the function that restores it.
func SetKeyHash(f func(pid uuid.UUID, txid string) int64) (restore func()) {
	old := keyHash
	keyHash = f
	return func() { keyHash = old }
}

// SetMintedKey replaces the sidecar's minted key (to force collisions) and
// returns the function that restores it.
func SetMintedKey(f func(pid uuid.UUID, tick int64) int64) (restore func()) {
	old := mintedKey
	mintedKey = f
	return func() { mintedKey = old }
}

// KeyHash and MintedKey are the sidecar's hashes, for tests.
func KeyHash(pid uuid.UUID, txid string) int64  { return keyHash(pid, txid) }
func MintedKey(pid uuid.UUID, tick int64) int64 { return mintedKey(pid, tick) }

// MintedTickMillis is mintedTickMillis, for tests.
const MintedTickMillis = mintedTickMillis

// MintedSpan is mintedSpan, for tests.
const MintedSpan = mintedSpan

// BatchPart is one partition's messages of a projection batch.
type BatchPart struct {
	PID    uuid.UUID
	Base   int64
	Window time.Duration
	Msgs   []Message
}

// BatchRowOf returns the queen.dedup_batches row a batch of parts makes.
func BatchRowOf(parts ...BatchPart) (pids []uuid.UUID, bases, hashes []int64, expires time.Time) {
	var r dedupRuns
	for _, p := range parts {
		r.add(p.PID, p.Base, p.Window.Microseconds(), p.Msgs)
	}
	return r.pid, r.base, r.hashes, time.UnixMicro(r.expires)
}
