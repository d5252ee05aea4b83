package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// RecordVersion is the envelope version written by this build.
const RecordVersion = 1

// HeaderSize is the envelope header in bytes: version byte + CRC-32C. A
// caller of AppendEnveloped (AppendGathered) leaves this many bytes free
// at the front of its record buffer (its first piece).
const HeaderSize = 5

const headerSize = HeaderSize

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrCorruptRecord is returned by DecodeRecord (and Read) when a record
	// is shorter than its header or its checksum does not match.
	ErrCorruptRecord = errors.New("wal: corrupt record")
	// ErrUnknownVersion is returned by DecodeRecord for an envelope version
	// this build does not know.
	ErrUnknownVersion = errors.New("wal: unknown record version")
)

// EncodeRecord appends the envelope for payload to dst and returns it:
// version | crc32c(version|payload) | payload.
func EncodeRecord(dst, payload []byte) []byte {
	crc := crc32.Update(0, castagnoli, []byte{RecordVersion})
	crc = crc32.Update(crc, castagnoli, payload)
	dst = append(dst, RecordVersion)
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return append(dst, payload...)
}

// sealEnvelope fills rec[:HeaderSize] with the envelope header for the
// payload rec[HeaderSize:], in place (no copy of the payload).
func sealEnvelope(rec []byte) {
	rec[0] = RecordVersion
	binary.LittleEndian.PutUint32(rec[1:headerSize], envelopeCRC(rec))
}

// envelopeCRC is the checksum the envelope rec (version | crc | payload,
// at least HeaderSize bytes) carries: CRC-32C of its version byte followed
// by its payload.
func envelopeCRC(rec []byte) uint32 {
	crc := crc32.Update(0, castagnoli, rec[:1])
	return crc32.Update(crc, castagnoli, rec[headerSize:])
}

// DecodeRecord verifies an envelope and returns its payload (aliasing rec).
// Errors: ErrCorruptRecord (short or checksum mismatch), ErrUnknownVersion.
func DecodeRecord(rec []byte) ([]byte, error) {
	if len(rec) < headerSize {
		return nil, ErrCorruptRecord
	}
	if envelopeCRC(rec) != binary.LittleEndian.Uint32(rec[1:headerSize]) {
		return nil, ErrCorruptRecord
	}
	if rec[0] != RecordVersion {
		return nil, ErrUnknownVersion
	}
	return rec[headerSize:], nil
}

// PayloadCRC is the CRC-32C of a record's payload (without envelope): the
// fingerprint projector checkpoints store for the record at their index,
// so that a WAL directory can be checked against a checkpoint.
func PayloadCRC(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }
