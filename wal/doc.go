// Package wal is the broker's write-ahead log: every accepted push is
// appended here and fsynced before the broker answers it.
//
// # Files
//
// The log is a directory of segment files (the binary layout of
// github.com/tidwall/wal, which earlier builds wrote through; this package
// now writes and reads them itself, segments.go, and opens their
// directories unchanged). A segment is named by the index of its first
// entry as 20 decimal digits ("00000000000000000001"); indexes start at 1
// and grow by one with no gaps. Each entry on disk is
//
//	uvarint(len(record)) | record
//
// and every record is wrapped in an envelope with a checksum:
//
//	byte 0      version (1)
//	bytes 1..4  CRC-32C (Castagnoli), little endian, over version | payload
//	bytes 5..   payload (opaque to this package; package ingest defines it)
//
// A segment's records may be followed by zero bytes up to the end of the
// file (the padding of a preallocated segment, below). A record is never
// shorter than its 5-byte header, so a zero length prefix cannot start
// one: where a record would start, a zero byte followed by zeros only to
// the end of the file ends the segment's data; followed by anything else
// it is damage. The file size therefore no longer marks the end of the
// data while a segment is the tail, but it does again once the segment is
// sealed or the log is closed cleanly: both cut the padding, so a sealed
// segment, and every segment of a stopped log, is byte for byte what an
// appending writer (earlier builds, Options.NoPreallocate) writes.
//
// # Preallocation
//
// Unless Options.NoPreallocate is set, a segment file is filled with
// zeros to SegmentSize + 64 KiB (or twice a segment under 64 KiB) and
// fsynced before records go in: the tail at open (a new log's first
// segment, or the tail of a log written by appending), and every later
// segment ahead of need, by a preparer goroutine that writes
// "next-segment.prepared" and fsyncs it; the roll renames that file to the
// new segment's name, and the directory is fsynced with the batch, as
// for a created file. A group commit then overwrites allocated,
// initialised blocks: the file's size and block map do not change, and
// the tail is made durable with fdatasync(2), which flushes the data (and
// would flush a size or block change, such as a record written past the
// padding, which extends the file) but not the modification time, so ext4
// needs no journal commit for it. fallocate(2) would not do: its blocks
// are "unwritten", and the first write to each converts it, a metadata
// change every fdatasync would commit. When a prepared file is not ready
// at a roll, or padding fails (a full disk), or the file system has less
// than twice the padding free (zeros written until ENOSPC would fill, for
// a moment, the disk appends and PostgreSQL need), the segment is created
// empty and appended to, as before; nothing else changes. Records never reach
// the prepared file before it is renamed, so one left by a crash holds no
// records: Open removes it. Size and MaxBytes count the bytes up to each
// segment's last record; the padding of the tail and the prepared file
// take up to 2 × (SegmentSize + 64 KiB) more on disk.
//
// # Memory
//
// The tail segment and the last sealed segment read (or rolled from) are
// kept in memory (Options.SegmentSize bounds both; a record larger than a
// segment makes its segment that large). A Cursor and View hand out slices
// of that memory (Read returns a copy); callers must not modify them. A
// tail's buffer has room for a whole segment, so it is never reallocated
// and copied as it fills (tidwall's grew by append: each byte was copied
// about four more times, into fresh pages), and it is the buffer of a
// segment dropped from memory earlier whenever no reader can still hold a
// slice of that one: a cursor's payloads stay valid until it releases
// their index (Cursor.Release; the projector releases its checkpoint once
// a batch is committed), a View's while its callback runs (segments.go,
// "Segment buffers"). So, while the projector keeps up, the log neither
// allocates nor zeroes a segment's worth of memory per roll, and holds
// about three segments (the tail, the cached sealed one, one spare; a
// buffer dropped beyond the spare is left to the garbage collector, which
// frees it once no reader holds a slice of it). A push record is handed
// over in pieces (AppendGatheredAsync): package ingest lays out every byte
// but the payloads behind HeaderSize free bytes, in a buffer of its own,
// and each payload is a slice of the request body. The writer copies the
// pieces straight into the tail segment's memory and seals the envelope
// in that copy (the caller's memory is only read), and one write call
// hands the tail's new bytes to the file: the payload's one copy between
// the request body and the file. Reads of the tail and of the segment
// rolled from last (what the projector reads) are served from that memory
// as written; only a sealed segment read back from its file is verified
// first (see Recovery on open).
//
// # Group commit
//
// One writer goroutine owns appends; they reach it through a queue
// (1,024 deep), so handing an append over does not sleep while the writer
// fsyncs (only when 1,024 are already waiting).
// Concurrent Append calls that arrive while a write is in progress are
// collected into one batch (up to Options.MaxBatchBytes), written with one
// write call per segment it touches and made durable with one fsync of the
// tail segment. No Append returns before that fsync, and an
// AppendEnvelopedAsync (AppendGatheredAsync) learns its outcome only
// after it (its onDone call from the writer); an index becomes visible to
// readers (DurableIndex, Notify) only after it. A segment rolls (as tidwall's
// did) before a batch when the tail is already past SegmentSize, and after
// the record that takes it to SegmentSize or more; the segment rolled from
// has its zero padding cut and is fsynced before the next file is created
// (or the prepared one renamed), and the directory is fsynced with the
// batch, so the new file's name survives a power cut. The tail itself is
// made durable with fdatasync (Preallocation, above).
//
// # Failure (fail-stop)
//
// A failed write or fsync fails every Append of that batch. The segment
// files are then closed and never written through that handle again: the
// log is rolled back to the last durable index (the failed batch's bytes
// cut, as by the repair below) and reopened, before those Appends return;
// when that rollback fails too, it is retried before the next append. A
// failed batch's entries are never readable through the running Log: its
// indexes are given to the next batch's records.
//
// One window is left: the durable index is not stored on disk, so if the
// process stops (a crash, kill -9, a power cut, or a stop while the
// rollback keeps failing) after a failed write or fsync and before its
// rollback has completed, the batch's records may still be in the segment
// files when the log is next opened (a failed fsync does not mean the
// bytes never reached the disk). Open cuts only records that are torn or
// fail their checksum; whole ones are kept and projected, although their
// Appends failed (or never returned). An item answered "failed" is
// therefore not stored later except in that case; the push docs
// (docs/push.md, "Durability") say what a producer does about it.
//
// # Recovery on open
//
// Before the segments are opened, Open scans the tail segment record by
// record (length prefix, envelope version, checksum). At the first record
// that is incomplete or does not verify (a torn write), the segment is cut:
// the bytes from that point to the last non-zero one are first copied to
// cut/<segment>.<unix-nanos>.bin as evidence, then the file is truncated and
// fsynced (and padded again when the log preallocates), and the cut is
// returned in a RepairReport and logged. Nothing is skipped silently:
// records before the cut are kept, records after it are in the evidence
// file only. Zeros after the last record are padding, not a cut: a
// preallocated tail after a crash, or a file whose size reached the disk
// before its data (no record of such a tail was acknowledged: an
// acknowledged record was fdatasynced, and no record is all zeros). Corruption in an older, sealed segment is not
// repaired: Read returns ErrCorruptRecord from the first damaged record to
// the segment's end, and serves the records before it from the file with
// this package's own verified reader (ReadRecordAt). A damaged segment is
// never loaded into memory for reads. A truncation that a crash interrupted
// inside tidwall in an earlier build (a "<segment>.START" or ".END" file)
// is finished on open, as tidwall did, before the tail is scanned: the
// segment scanned is the one the log appends to.
//
// # Byte cap
//
// With Options.MaxBytes set, an Append whose record would take the segment
// files past it fails with ErrFull and writes nothing (Size reports the
// bytes up to each segment's last record; zero padding is not counted).
// The projector truncates projected segments early above 3/4 of it.
//
// # Truncation
//
// TruncateProjected removes whole sealed segments whose every entry is at or
// below the projector's checkpoint and whose file is older than a retention
// period, so that a PostgreSQL restored from an older backup can still be
// re-projected from the WAL within that period (docs/operations.md, "Backup
// and restore of PostgreSQL"). Whole files
// are removed, oldest first; the first kept segment is not touched.
//
// # Concurrency
//
// One writer goroutine, any number of Read callers (serialised with
// truncation; the segment store takes a mutex around its in-memory state,
// never around file I/O of the writer).
package wal
