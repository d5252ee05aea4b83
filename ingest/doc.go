// Package ingest is the push pipeline: it parses and validates a push body
// (all-or-nothing, before any write), mints UUIDv7 message ids, encodes the
// items as one WAL record, appends it (group commit), waits for the
// projector's verdict and maps it to the per-item statuses of
// spec/producing.md.
//
// A body is read in one pass by a validating JSON scanner (parse.go,
// scan.go) that records where each item's payload sits; the payload bytes
// are copied once, from the body into the push record, which is encoded to
// its exact size behind the WAL envelope's header. The projector decodes
// records with DecodeRecordInto (allocations per record, not per item)
// and maps them with Record.AppendProjectItems, the one mapping to
// pg.ProjectItem (the transaction route uses it too, as it uses NewItems,
// the one place push items are minted).
//
// # Push record (the payload of one WAL record)
//
//	kind         byte     1 = push
//	accepted_at  varint   broker acceptance time, Unix microseconds
//	count        uvarint  number of items
//	count × item:
//	  flags          byte      bit0: producer_sub present
//	  message_id     16 bytes  UUIDv7
//	  queue          bytes     uvarint length + UTF-8
//	  partition      bytes     uvarint length + UTF-8
//	  transaction_id bytes     uvarint length + bytes (the minted id's text when absent)
//	  producer_sub   bytes     only when flags bit0
//	  payload        bytes     the item's JSON value, byte-for-byte as sent
//
// The acceptance time travels in the record so that a replay after an
// outage probes the dedup window with the same times the live path would
// have (DESIGN.md §3).
package ingest
