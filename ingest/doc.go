// Package ingest is the push pipeline: it parses and validates a push body
// (all-or-nothing, before any write), mints UUIDv7 message ids, encodes the
// items as one WAL record, appends it (group commit), waits for the
// projector's verdict and maps it to the per-item statuses of
// spec/producing.md.
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
// Other flag bits make a kind 2 record unreadable (ErrBadRecord). The
// projector reads records item by item (RecordReader), so a record of
// millions of items is projected in bounded pieces.
//
// The acceptance time travels in the record so that a replay after an
// outage probes the dedup window with the same times the live path would
// have (DESIGN.md §3).
package ingest
