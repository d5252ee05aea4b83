package pg

import "github.com/google/uuid"

// SetKeyHash replaces the sidecar's key hash (to force collisions) and
// returns the function that restores it.
func SetKeyHash(f func(pid uuid.UUID, txid string) int64) (restore func()) {
	old := keyHash
	keyHash = f
	return func() { keyHash = old }
}

// MintedSpan is mintedSpan, for tests.
const MintedSpan = mintedSpan

// RunsOf returns the sidecar rows add builds for msgs stored at base:
// each row's base offset, hashes and minted ids.
func RunsOf(pid uuid.UUID, base int64, msgs []Message) (bases []int64, hashes [][]int64, minted [][]uuid.UUID) {
	var r dedupRuns
	r.add(pid, base, msgs)
	for i := range r.pid {
		bases = append(bases, r.base[i])
		hashes = append(hashes, r.hashes[r.hashLo[i]-1:r.hashHi[i]])
		minted = append(minted, r.minted[r.mintLo[i]-1:r.mintHi[i]])
	}
	return bases, hashes, minted
}

// FastAcks is how many acks s completed with its lease memo (fastAck).
func FastAcks(s *Store) int64 { return s.leases.applied.Load() }

// PredictedBatches returns how many batches s projected in one round trip
// (predicted offsets) and how many such attempts rolled back to the long way.
func PredictedBatches(s *Store) (committed, missed int64) {
	return s.predicted.Load(), s.predictedMiss.Load()
}
