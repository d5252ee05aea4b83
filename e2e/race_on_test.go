//go:build race

package e2e

// raceEnabled: built with -race (Go code runs several times slower).
const raceEnabled = true
