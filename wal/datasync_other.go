//go:build !linux

package wal

import (
	"math"
	"os"
)

// dataSync is f.Sync where fdatasync(2) is not available.
func dataSync(f *os.File) error { return f.Sync() }

// freeBytes reports no limit where statfs is not used: padding then
// stops at the first failed write, as on a full disk.
func freeBytes(string) (int64, error) { return math.MaxInt64, nil }
