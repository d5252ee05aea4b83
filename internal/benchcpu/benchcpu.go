// Package benchcpu reports a Go benchmark's process CPU time per operation.
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// Report starts measuring the process's CPU time (user and system, all
// threads: the garbage collector's included); the function it returns
// reports it per iteration as the benchmark metric cpu-ns/op. On a shared
// machine the CPU time an operation takes is steadier than its wall time
// (ns/op), which grows with every other process that runs. Use it as
// `defer benchcpu.Report(b)()` after the benchmark's setup.
func Report(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

// processCPU is the process's user plus system CPU time so far (0 if the
// kernel does not say).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
