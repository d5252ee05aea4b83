// Package crypt encrypts message payloads at rest for queues with
// encryptionEnabled, in the format Queen stores (described below), so that
// payloads written by either broker can be read by the other. What is
// encrypted, and where not: docs/operations.md, Encryption.
//
// Format. The key is QUEEN_ENCRYPTION_KEY: 64 hexadecimal characters, the 32
// bytes of an AES-256 key. A payload's bytes are sealed with AES-256-GCM
// under a fresh random 16-byte IV (GCM with a 16-byte nonce, as Node's and
// OpenSSL's aes-256-gcm do with a 16-byte IV), no additional data, and a
// 16-byte tag. The stored value is the JSON object
//
//	{"encrypted":"<base64 ciphertext>","iv":"<base64 IV>","authTag":"<base64 tag>"}
//
// with standard padded base64 (RFC 4648 §4). The ciphertext has the length of
// the plaintext; an empty payload has "encrypted":"".
package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Sizes of the format.
const (
	// KeyHexLen is the length of QUEEN_ENCRYPTION_KEY in hex characters.
	KeyHexLen = 2 * KeySize
	// KeySize is the AES-256 key size in bytes.
	KeySize = 32
	// IVSize is the size of the per-payload random IV (the GCM nonce), bytes.
	IVSize = 16
	// TagSize is the size of the GCM authentication tag in bytes.
	TagSize = 16
)

// Sentinel errors.
var (
	// ErrInvalidKey is returned by ParseKey for a key that is not exactly 64
	// hexadecimal characters.
	ErrInvalidKey = errors.New("crypt: QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters")
	// ErrBadEnvelope is returned by Decrypt when its input is not an
	// {"encrypted","iv","authTag"} JSON object of base64 strings with a
	// 16-byte IV and a 16-byte tag.
	ErrBadEnvelope = errors.New("crypt: malformed encrypted payload")
	// ErrAuthFailed is returned by Decrypt when the tag does not verify: the
	// ciphertext, IV or tag was altered, or the payload was sealed with
	// another key.
	ErrAuthFailed = errors.New("crypt: payload authentication failed (wrong key or tampered data)")
)

// Key seals and opens payloads. It is safe for concurrent use. Its String
// and GoString methods never show key material.
type Key struct {
	aead cipher.AEAD
}

// ParseKey parses QUEEN_ENCRYPTION_KEY: exactly KeyHexLen (64) hexadecimal
// characters, either case, no surrounding space. It returns ErrInvalidKey
// (wrapped with what is wrong, never with the key) otherwise.
func ParseKey(s string) (*Key, error) {
	if len(s) != KeyHexLen {
		return nil, fmt.Errorf("%w: got %d characters", ErrInvalidKey, len(s))
	}
	raw, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not hexadecimal", ErrInvalidKey)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("crypt: AES key: %w", err)
	}
	aead, err := cipher.NewGCMWithNonceSize(block, IVSize)
	if err != nil {
		return nil, fmt.Errorf("crypt: GCM: %w", err)
	}
	return &Key{aead: aead}, nil
}

// String hides the key.
func (k *Key) String() string { return "crypt.Key{redacted}" }

// GoString hides the key from %#v.
func (k *Key) GoString() string { return k.String() }

// envelope is the stored JSON object. Field order matches Queen's.
type envelope struct {
	Encrypted *string `json:"encrypted"`
	IV        *string `json:"iv"`
	AuthTag   *string `json:"authTag"`
}

// Encrypt seals plain (any bytes, including empty or not JSON) under a fresh
// random IV and returns the envelope's JSON bytes. It fails only if the
// system's random source fails.
func (k *Key) Encrypt(plain []byte) ([]byte, error) {
	iv := make([]byte, IVSize)
	if _, err := rand.Read(iv); err != nil {
		return nil, fmt.Errorf("crypt: random IV: %w", err)
	}
	return k.seal(iv, plain)
}

// seal encrypts plain under iv and encodes the envelope.
func (k *Key) seal(iv, plain []byte) ([]byte, error) {
	sealed := k.aead.Seal(nil, iv, plain, nil) // ciphertext || tag
	ct, tag := sealed[:len(plain)], sealed[len(plain):]
	enc := base64.StdEncoding
	e, i, t := enc.EncodeToString(ct), enc.EncodeToString(iv), enc.EncodeToString(tag)
	return json.Marshal(envelope{Encrypted: &e, IV: &i, AuthTag: &t})
}

// Decrypt opens an envelope produced by Encrypt (or by Queen) and returns
// the plaintext. Errors: ErrBadEnvelope when the input is not a well-formed
// envelope, ErrAuthFailed when the tag does not verify.
func (k *Key) Decrypt(env []byte) ([]byte, error) {
	var e envelope
	if err := json.Unmarshal(env, &e); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object of strings", ErrBadEnvelope)
	}
	if e.Encrypted == nil || e.IV == nil || e.AuthTag == nil {
		return nil, fmt.Errorf("%w: want \"encrypted\", \"iv\" and \"authTag\"", ErrBadEnvelope)
	}
	enc := base64.StdEncoding
	ct, err1 := enc.DecodeString(*e.Encrypted)
	iv, err2 := enc.DecodeString(*e.IV)
	tag, err3 := enc.DecodeString(*e.AuthTag)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("%w: bad base64", ErrBadEnvelope)
	}
	if len(iv) != IVSize || len(tag) != TagSize {
		return nil, fmt.Errorf("%w: iv is %d bytes and authTag %d, want %d and %d",
			ErrBadEnvelope, len(iv), len(tag), IVSize, TagSize)
	}
	plain, err := k.aead.Open(nil, iv, append(ct, tag...), nil)
	if err != nil {
		return nil, ErrAuthFailed
	}
	if plain == nil {
		plain = []byte{}
	}
	return plain, nil
}
