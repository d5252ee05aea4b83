package binenc

const hexDigits = "0123456789abcdef"

// PutUUIDText writes the canonical text of the UUID id (lowercase hex in
// 8-4-4-4-12 groups, what uuid.UUID.String returns) into dst[:36] without
// allocating.
func PutUUIDText(dst []byte, id [16]byte) {
	_ = dst[35]
	j := 0
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst[j] = '-'
			j++
		}
		dst[j], dst[j+1] = hexDigits[b>>4], hexDigits[b&0xf]
		j += 2
	}
}

// IsUUIDText reports whether s is exactly the canonical text of the UUID
// id (PutUUIDText's). A text of another length, or whose first two or
// last two characters differ, is refused before the id's text is built:
// the first two refuse nearly every client transactionId, the last two
// (the id's last byte, random in a UUIDv7) also the UUIDv7 texts Queen's
// SDKs send, whose first characters are a time close to the broker's
// minted id's. The push record (a minted transactionId is left out) and
// the dedup sidecar (a minted id's key is not probed) both ask it per
// item.
func IsUUIDText(id [16]byte, s string) bool {
	if len(s) != 36 || s[0] != hexDigits[id[0]>>4] || s[1] != hexDigits[id[0]&0xf] ||
		s[34] != hexDigits[id[15]>>4] || s[35] != hexDigits[id[15]&0xf] {
		return false
	}
	var text [36]byte
	PutUUIDText(text[:], id)
	return string(text[:]) == s
}
