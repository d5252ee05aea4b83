//go:build race

package pg

// raceEnabled: built with -race, whose instrumentation allocates (tests
// that count allocations skip that check).
const raceEnabled = true
