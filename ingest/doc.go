// Package ingest is the push pipeline: it parses and validates a push body
// (all-or-nothing, before any write), mints UUIDv7 message ids, encodes the
// items as one WAL record, appends it (group commit), waits for the
// projector's verdict and maps it to the per-item statuses of
// docs/push.md, "Verdicts".
//
// A body is read in one pass by a validating JSON scanner (parse.go,
// scan.go) that records where each item's payload sits. The push record
// (the compact kind 2 below) is laid out in pieces (encodeRecordGathered):
// every byte but the payloads in one buffer, behind the WAL envelope's
// header, and each payload as a slice of the body itself, so that the WAL
// writer copies the payload bytes once, from the body straight into its
// tail segment (wal.Log.AppendGatheredAsync). EncodeRecord writes the
// same bytes in one piece. ParseBodyLimit stops at QUEEN_MAX_PUSH_ITEMS: items
// past the limit are only checked for syntax. The projector decodes a
// record that fits its batch with DecodeRecordInto (allocations per record,
// not per item) and reads a larger one item by item (RecordReader); both
// map items with Item.ProjectItem, the one mapping to pg.ProjectItem
// (Record.AppendProjectItems for whole records; the transaction route uses
// it too, as it uses NewItems, the one place push items are minted).
//
// # Push record (the payload of one WAL record)
//
//	kind         byte     2 = push (1 = the first push layout, still read)
//	accepted_at  varint   broker acceptance time, Unix microseconds
//	count        uvarint  number of items
//	count × item:
//	  flags          byte      bit0: producer_sub present
//	                           bit1: partition is "Default" (not written)
//	                           bit2: transaction_id is message_id's text (not written)
//	  message_id     16 bytes  UUIDv7
//	  queue          bytes     uvarint length + UTF-8
//	  partition      bytes     uvarint length + UTF-8; absent with bit1
//	  transaction_id bytes     uvarint length + bytes; absent with bit2
//	  producer_sub   bytes     only when flags bit0
//	  payload        bytes     the item's JSON value, byte-for-byte as sent
//
// Kind 1 has the same item layout with only bit0 defined: partition and
// transaction_id (the minted id's text when the push had none) are always
// written. Kind 2 leaves out what the flags say, so that a record is never
// much larger than the body it came from: the smallest item a push body can
// hold ({"queue":"q","payload":0}, 26 bytes with its comma) takes 22 bytes
// here, not 66, and a push at the body limit fits the WAL's record limit.
// Other flag bits make a kind 2 record unreadable (ErrBadRecord). A record
// of more items than one projection batch takes is read item by item
// (RecordReader), so a record of millions of items is projected in bounded
// pieces.
//
// The acceptance time travels in the record so that a replay after an
// outage probes the dedup window with the same times the live path would
// have (docs/push.md, "Dedup").
package ingest
