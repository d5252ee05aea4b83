// Package wal is the broker's write-ahead log: every accepted push is
// appended here and fsynced before the broker answers it.
//
// # Files
//
// The log is a directory of segment files managed by github.com/tidwall/wal
// (binary format). A segment is named by the index of its first entry as 20
// decimal digits ("00000000000000000001"); indexes start at 1 and grow by one
// with no gaps. Each tidwall entry on disk is
//
//	uvarint(len(record)) | record
//
// and this package wraps every record in its own envelope, because tidwall
// itself has no checksum:
//
//	byte 0      version (1)
//	bytes 1..4  CRC-32C (Castagnoli), little endian, over version | payload
//	bytes 5..   payload (opaque to this package; package ingest defines it)
//
// # Memory
//
// tidwall keeps the tail segment and the last sealed segment it read in
// memory (Options.SegmentSize bounds both; a record larger than a segment
// makes its segment that large). Read returns slices of that memory, which
// tidwall only ever appends to; callers must not modify them. A push
// record is built behind HeaderSize free bytes (AppendEnveloped), so the
// envelope is sealed in place: the payload is copied from the request body
// once by package ingest, then by tidwall into its batch and its segment
// memory on the way to the file.
//
// # Group commit
//
// One writer goroutine owns appends. Concurrent Append calls that arrive
// while a write is in progress are collected into one tidwall batch (up to
// Options.MaxBatchBytes), written with one write call and made durable with
// one fsync of the tail segment. No Append returns before that fsync; an
// index becomes visible to readers (DurableIndex, Notify) only after it.
// When tidwall rolls to a new segment inside a batch, the directory is
// fsynced too, so the new file's name survives a power cut.
//
// # Failure (fail-stop)
//
// A failed write or fsync fails every Append of that batch. The tidwall
// handle is then closed and never written again: the log is repaired back to
// the last durable index (see below) and reopened before the next append.
// Entries of a failed batch can therefore never be read later, so an item
// answered "failed" is never projected.
//
// # Recovery on open
//
// Before tidwall opens the directory, Open scans the tail segment record by
// record (length prefix, envelope version, checksum). At the first record
// that is incomplete or does not verify (a torn write, a zero-filled tail),
// the segment is cut: the bytes from that point on are first copied to
// cut/<segment>.<unix-nanos>.bin as evidence, then the file is truncated and
// fsynced, and the cut is returned in a RepairReport and logged. Nothing is
// skipped silently: records before the cut are kept, records after it are in
// the evidence file only. Corruption in an older, sealed segment is not
// repaired: Read returns ErrCorruptRecord from the first damaged record to
// the segment's end, and serves the records before it from the file with
// this package's own verified reader (ReadRecordAt). A damaged segment is
// never handed to tidwall: tidwall refuses all of it, and once it had loaded
// one it was seen to serve that segment's records for the indexes of the
// next segment, with valid checksums.
//
// # Byte cap
//
// With Options.MaxBytes set, an Append whose record would take the segment
// files past it fails with ErrFull and writes nothing (Size reports the
// bytes). The projector truncates projected segments early above 3/4 of it.
//
// # Truncation
//
// TruncateProjected removes whole sealed segments whose every entry is at or
// below the projector's checkpoint and whose file is older than a retention
// period, so that a PostgreSQL restored from an older backup can still be
// re-projected from the WAL within that period (DESIGN.md §5).
//
// # Concurrency
//
// tidwall/wal is not safe for concurrent readers, so reads are serialised
// here; one writer goroutine, any number of Read callers.
package wal
