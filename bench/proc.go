package bench

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// clockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 per second for that interface whatever the
// kernel's own tick rate.
const clockTicks = 100

// errNoPID is returned by the CPU samplers for pid 0 (not measured).
var errNoPID = errors.New("bench: no process id")

// processCPU is the CPU time, user plus system, that process pid (all its
// threads) has used since it started, in seconds, from /proc/<pid>/stat.
// The broker runs as one process, so this is all of its CPU.
func processCPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errNoPID
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return float64(st.UTime+st.STime) / clockTicks, nil
}

// serverCPU is the CPU time, user plus system, in seconds, of a
// PostgreSQL server so far: its postmaster (pid), every live child of it
// (backends, WAL writer, checkpointer, autovacuum …), and, through the
// postmaster's cutime and cstime, every child that has already exited and
// been reaped. Children's own children are counted through their cutime
// and cstime. Sampled before and after a run, the difference is the
// server's CPU for the run, backends that came and went included; a
// child that exits between the two reads of one sample can be missed
// or counted twice within that sample, an error of at most one
// backend's lifetime.
func serverCPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errNoPID
	}
	pm, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := pm.Stat()
	if err != nil {
		return 0, err
	}
	ticks := int64(st.UTime+st.STime) + int64(st.CUTime+st.CSTime)
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, fmt.Errorf("bench: list processes: %w", err)
	}
	for _, p := range procs {
		cs, err := p.Stat()
		if err != nil || cs.PPID != pid {
			continue // gone since the listing, or not the server's
		}
		ticks += int64(cs.UTime+cs.STime) + int64(cs.CUTime+cs.CSTime)
	}
	return float64(ticks) / clockTicks, nil
}

// selfCPU is this process's CPU time so far, user plus system, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
