package binenc

// IsUUIDText reports whether s is exactly the canonical text of the UUID
// id (lowercase hex in 8-4-4-4-12 groups, what uuid.UUID.String returns),
// without building that text: it stops at the first byte that differs, so
// a client transactionId costs a byte or two, not a 36-byte encode. The
// push record (a minted transactionId is left out) and the dedup sidecar
// (a minted id's key is not probed) both ask it per item.
func IsUUIDText(id [16]byte, s string) bool {
	const hex = "0123456789abcdef"
	if len(s) != 36 {
		return false
	}
	j := 0
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			if s[j] != '-' {
				return false
			}
			j++
		}
		if s[j] != hex[b>>4] || s[j+1] != hex[b&0xf] {
			return false
		}
		j += 2
	}
	return true
}
