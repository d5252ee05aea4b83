package wal

import (
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAppendGroupCommit: concurrent appenders sharing group commits,
// as pushes do (8 appenders of 30 KB records: 8 connections × 100 items of
// 256 bytes; 64 appenders of 400-byte records: 64 connections × 1 item).
// Sync=false isolates the CPU of encoding and batching from the disk.
// One op is one Append; bytes/s counts payload bytes.
func BenchmarkAppendGroupCommit(b *testing.B) {
	for _, sh := range []struct {
		appenders, size int
	}{{8, 30 << 10}, {64, 400}} {
		for _, sync := range []bool{false, true} {
			b.Run(fmt.Sprintf("appenders=%d/size=%d/sync=%t", sh.appenders, sh.size, sync), func(b *testing.B) {
				benchAppend(b, sh.appenders, sh.size, !sync)
			})
		}
	}
}

func benchAppend(b *testing.B, appenders, size int, noSync bool) {
	l, _, err := Open(filepath.Join(b.TempDir(), "wal"), Options{NoSync: noSync, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op") }()
	var wg sync.WaitGroup
	per := b.N / appenders
	for g := 0; g < appenders; g++ {
		n := per
		if g == 0 {
			n += b.N % appenders
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			vec := piecesForBench(testPayload(g, size))
			for i := 0; i < n; i++ {
				if _, err := appendForBench(l, vec); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// processCPU is the CPU time (user and system) this process has used: the
// appenders', the writer's and the kernel's work in their system calls,
// which ns/op (wall time, most of it waiting for the disk) does not show.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// appendForBench is one push's append of its record, in the pieces
// package ingest hands over (piecesForBench).
func appendForBench(l *Log, vec [][]byte) (uint64, error) { return l.AppendGathered(vec, nil) }

// piecesForBench splits payload as package ingest lays out a push record
// of 256-byte items: HeaderSize free bytes and the record's first bytes,
// then, per item, 40 bytes of its head (a slice of the record's own
// buffer) and about 260 of its payload (a slice of the request body).
func piecesForBench(payload []byte) [][]byte {
	head := make([]byte, HeaderSize, HeaderSize+len(payload))
	vec := [][]byte{}
	for len(payload) > 0 {
		h := min(40, len(payload))
		start := len(head)
		head = append(head, payload[:h]...)
		if len(vec) == 0 {
			start = 0
		}
		vec = append(vec, head[start:len(head):len(head)])
		payload = payload[h:]
		p := min(260, len(payload))
		vec = append(vec, payload[:p:p])
		payload = payload[p:]
	}
	return vec
}

// BenchmarkCursorNext: the projector's read of durable records, one at a
// time, each released once read (records of 30 KB or 400 bytes; 2000 of
// them span sealed segments, which are loaded from their files).
func BenchmarkCursorNext(b *testing.B) {
	for _, size := range []int{30 << 10, 400} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			l, _, err := Open(filepath.Join(b.TempDir(), "wal"), Options{NoSync: true, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			payload := testPayload(1, size)
			const n = 2000
			for i := 0; i < n; i++ {
				if _, err := l.Append(payload, nil); err != nil {
					b.Fatal(err)
				}
			}
			c := l.NewCursor(1)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if c.Position() > n {
					c.Seek(1)
				}
				es, err := c.Next(1, 1<<30)
				if err != nil || len(es) != 1 {
					b.Fatalf("Next: %d entries, %v", len(es), err)
				}
				c.Release(es[0].Index) // as the projector does after its commit
			}
		})
	}
}
