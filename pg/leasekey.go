package pg

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/google/uuid"
)

// Lease ids carry the cursor they were minted for.
//
// A pop's lease id is written into its cursor row (queen.consumer_cursors
// lease_id), and the lease routes find the row again by the id alone
// (POST /api/v1/lease/:leaseId/extend carries nothing else). That table
// has no index on lease_id, so that the cursor updates of every pop and
// ack, which all change lease_id, can be HOT (see schema.sql). Instead,
// each cursor row has a lease_key (a bigint from a sequence, fixed when
// the row is made, uniquely indexed), and every lease id names the key of
// a row it was written to:
//
//	bytes 0..7   random (crypto/rand), except byte 6's high nibble, the
//	             UUID version 8 ("custom", RFC 9562), and byte 7's low
//	             bit: 1 when the lease may cover several partitions
//	             (a pop with partitions > 1)
//	bytes 8..15  the lease_key of the lease's first cursor, big-endian,
//	             with the top two bits 10 (the RFC 9562 variant); keys
//	             are below 2^62
//
// A lease of one partition is one row, found by its key (an index probe)
// and checked by its full id. A lease of several partitions is every row
// of the key row's queue and consumer group whose lease_id is the id (one
// probe per partition of that queue, as a wildcard pop's candidate scan
// does). A lease id minted before lease keys existed (a UUIDv7) is looked
// for in the whole table (no index); such leases lapse within their lease
// time after an upgrade.
//
// Before the pop knows its cursor it holds a seed: the random half with
// the version and partition bit set and bytes 8..15 zero (so a seed is
// never a bound id, whose byte 8 has its top bit set). The claim
// statement binds the seed to the cursor it locks (leaseIDSQL), and the
// broker computes the same id (bindLeaseID).

// newLeaseSeed returns a fresh seed for a pop's lease; multi says the
// lease may cover several partitions.
func newLeaseSeed(multi bool) (uuid.UUID, error) {
	var id uuid.UUID
	if _, err := rand.Read(id[:8]); err != nil {
		return uuid.Nil, fmt.Errorf("pg: lease id: %w", err)
	}
	id[6] = id[6]&0x0f | 0x80
	id[7] &^= 1
	if multi {
		id[7] |= 1
	}
	return id, nil
}

// leaseKeyMark is the variant bits (10) put above a lease key in bytes
// 8..15 of a lease id.
const leaseKeyMark = uint64(1) << 63

// bindLeaseID is seed bound to the cursor row with lease_key key: the
// lease id that row's lease is written under (the same as leaseIDSQL).
func bindLeaseID(seed uuid.UUID, key int64) uuid.UUID {
	id := seed
	binary.BigEndian.PutUint64(id[8:], uint64(key)|leaseKeyMark)
	return id
}

// leaseIDSQL is the SQL expression of bindLeaseID(seed, key) for SQL
// expressions seed (a uuid) and key (a bigint).
func leaseIDSQL(seed, key string) string {
	return `encode(overlay(uuid_send(` + seed + `) placing int8send(` + key +
		` | (-9223372036854775807 - 1)) from 9 for 8), 'hex')::uuid`
}

// legacyLeaseScan is the one turn of the lease lookups that scan the
// whole cursor table (ids minted before lease keys, UUIDv7, and
// multi-partition ids whose key row does not hold them): ExtendLease.
var legacyLeaseScan = make(chan struct{}, 1)

// leaseTarget says how to find the cursor rows of lease id: ok with the
// lease key of its first cursor and whether it may cover several
// partitions, for an id bindLeaseID made; ok false for any other id (one
// minted before lease keys, a seed, or not one of ours).
func leaseTarget(id uuid.UUID) (key int64, multi, ok bool) {
	if id[6]>>4 != 8 {
		return 0, false, false
	}
	v := binary.BigEndian.Uint64(id[8:])
	if v>>62 != 2 {
		return 0, false, false
	}
	return int64(v &^ leaseKeyMark), id[7]&1 == 1, true
}

// leaseRowsSQL is a WHERE condition on queen.consumer_cursors c selecting
// the rows held under lease $1 (a uuid), and the arguments after $1 it
// needs (numbered from $first): see leaseTarget.
func leaseRowsSQL(id uuid.UUID, first int) (string, []any) {
	key, multi, ok := leaseTarget(id)
	p := fmt.Sprintf("$%d", first)
	switch {
	case !ok:
		return `c.lease_id = $1`, nil
	case !multi:
		return `c.lease_key = ` + p + ` AND c.lease_id = $1`, []any{key}
	default:
		return `c.lease_id = $1 AND (c.partition_id, c.consumer_group) IN (
			SELECT p.id, k.consumer_group FROM queen.consumer_cursors k
			JOIN queen.partitions p0 ON p0.id = k.partition_id
			JOIN queen.partitions p ON p.queue_id = p0.queue_id
			WHERE k.lease_key = ` + p + `)`, []any{key}
	}
}
