package pg

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU starts measuring the process's CPU time (user and system,
// all threads: the garbage collector's included); the function it returns
// reports it per iteration as cpu-ns/op. On a shared machine the CPU time
// an operation takes is steadier than its wall time (ns/op), which grows
// with every other process that runs.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
