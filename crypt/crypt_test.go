package crypt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Known-answer vector made with Node.js v20 crypto.createCipheriv
// ("aes-256-gcm", key, 16-byte iv), as Queen's JavaScript side does.
const (
	katKey       = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	katIV        = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
	katPlain     = `{"order":42,"item":"coffee","note":"héllo"}`
	katEnvelope  = `{"encrypted":"UYFMznyov1T5qi2dz3359e9neVsdWzfKmHdImjtbSfNps9xB/RAW0YJmEt8=","iv":"oKGio6SlpqeoqaqrrK2urw==","authTag":"ViQW+F8SISezQBBRAKIrzA=="}`
	otherTestKey = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
)

// setup returns a random key.
func setup(t testing.TB) *Key {
	t.Helper()
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(hex.EncodeToString(raw))
	if err != nil {
		t.Fatalf("ParseKey: %v", err)
	}
	return k
}

// fields decodes an envelope's three fields, failing on any other shape.
func fields(t *testing.T, env []byte) (ct, iv, tag []byte) {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal(env, &m); err != nil {
		t.Fatalf("envelope %s: %v", env, err)
	}
	if len(m) != 3 {
		t.Fatalf("envelope %s: want exactly encrypted, iv, authTag", env)
	}
	dec := func(name string) []byte {
		s, ok := m[name]
		if !ok {
			t.Fatalf("envelope %s: no %q", env, name)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("envelope %q: %v", name, err)
		}
		return b
	}
	return dec("encrypted"), dec("iv"), dec("authTag")
}

// build encodes an envelope from raw parts.
func build(ct, iv, tag []byte) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `{"encrypted":%q,"iv":%q,"authTag":%q}`, b64(ct), b64(iv), b64(tag))
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"lower-case hex", katKey, true},
		{"upper-case hex", strings.ToUpper(katKey), true},
		{"empty", "", false},
		{"63 characters", katKey[:63], false},
		{"65 characters", katKey + "0", false},
		{"32 bytes of text", strings.Repeat("k", 32), false},
		{"not hex", "g" + katKey[1:], false},
		{"surrounding space", " " + katKey[1:], false},
		{"base64, 64 characters", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 48)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := ParseKey(tt.key)
			if tt.ok {
				if err != nil || k == nil {
					t.Fatalf("ParseKey: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("err = %v, want ErrInvalidKey", err)
			}
			if len(tt.key) > 8 && strings.Contains(err.Error(), tt.key) {
				t.Fatalf("error echoes the key: %v", err)
			}
		})
	}
}

func TestKeyDoesNotPrint(t *testing.T) {
	t.Parallel()
	k, err := ParseKey(katKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		if strings.Contains(s, "0102030405") || !strings.Contains(s, "redacted") {
			t.Fatalf("printed key: %s", s)
		}
	}
}

// TestCompatibility decrypts a payload sealed by Node.js, and seals the same
// plaintext under the same IV to the same bytes.
func TestCompatibility(t *testing.T) {
	t.Parallel()
	k, err := ParseKey(katKey)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := k.Decrypt([]byte(katEnvelope))
	if err != nil {
		t.Fatalf("Decrypt: %v", err)
	}
	if string(plain) != katPlain {
		t.Fatalf("plain = %q, want %q", plain, katPlain)
	}
	iv, _ := hex.DecodeString(katIV)
	env, err := k.seal(iv, []byte(katPlain))
	if err != nil {
		t.Fatal(err)
	}
	if string(env) != katEnvelope {
		t.Fatalf("envelope\n got %s\nwant %s", env, katEnvelope)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	tests := []struct {
		name  string
		plain []byte
	}{
		{"empty", []byte{}},
		{"nil", nil},
		{"JSON object", []byte(`{"orderId":123,"items":["a","b"]}`)},
		{"JSON null", []byte("null")},
		{"invalid JSON", []byte(`{"unterminated": [1, 2`)},
		{"every byte value", all},
		{"NUL bytes", []byte("\x00\x00secret\x00")},
		{"invalid UTF-8", []byte{0xff, 0xfe, 0xc3, 0x28}},
		{"unicode", []byte(`"日本語 — ünïcödé 🚀"`)},
		{"1 MiB random", big},
	}
	k := setup(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := k.Encrypt(tt.plain)
			if err != nil {
				t.Fatalf("Encrypt: %v", err)
			}
			ct, iv, tag := fields(t, env)
			if len(ct) != len(tt.plain) || len(iv) != IVSize || len(tag) != TagSize {
				t.Fatalf("sizes: ciphertext %d (plain %d), iv %d, tag %d", len(ct), len(tt.plain), len(iv), len(tag))
			}
			if len(tt.plain) >= 4 {
				b64 := base64.StdEncoding.EncodeToString(tt.plain)
				if bytes.Contains(env, tt.plain) || bytes.Contains(ct, tt.plain) || strings.Contains(string(env), b64) {
					t.Fatal("the envelope contains the plaintext")
				}
			}
			got, err := k.Decrypt(env)
			if err != nil {
				t.Fatalf("Decrypt: %v", err)
			}
			if got == nil || !bytes.Equal(got, tt.plain) {
				t.Fatalf("round trip: got %d bytes (nil=%v), want %d", len(got), got == nil, len(tt.plain))
			}
		})
	}
}

func TestFreshIVPerCall(t *testing.T) {
	t.Parallel()
	k := setup(t)
	plain := []byte(`{"same":"payload"}`)
	seen := map[string]bool{}
	for range 100 {
		env, err := k.Encrypt(plain)
		if err != nil {
			t.Fatal(err)
		}
		ct, iv, _ := fields(t, env)
		if seen[string(iv)] || seen[string(ct)] {
			t.Fatalf("repeated IV or ciphertext: %s", env)
		}
		seen[string(iv)], seen[string(ct)] = true, true
	}
}

// TestTamper flips one bit of the ciphertext, the IV or the tag, at the
// first, a middle and the last byte, and expects ErrAuthFailed every time.
func TestTamper(t *testing.T) {
	t.Parallel()
	k := setup(t)
	env, err := k.Encrypt([]byte(`{"amount":100,"to":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	ct, iv, tag := fields(t, env)
	parts := []struct {
		name string
		b    []byte
	}{{"encrypted", ct}, {"iv", iv}, {"authTag", tag}}
	for pi, part := range parts {
		for _, pos := range []int{0, len(part.b) / 2, len(part.b) - 1} {
			for _, bit := range []uint{0, 7} {
				t.Run(fmt.Sprintf("%s byte %d bit %d", part.name, pos, bit), func(t *testing.T) {
					t.Parallel()
					p := [3][]byte{bytes.Clone(ct), bytes.Clone(iv), bytes.Clone(tag)}
					p[pi][pos] ^= 1 << bit
					_, err := k.Decrypt(build(p[0], p[1], p[2]))
					if !errors.Is(err, ErrAuthFailed) {
						t.Fatalf("err = %v, want ErrAuthFailed", err)
					}
				})
			}
		}
	}
	t.Run("truncated ciphertext", func(t *testing.T) {
		t.Parallel()
		if _, err := k.Decrypt(build(ct[:len(ct)-1], iv, tag)); !errors.Is(err, ErrAuthFailed) {
			t.Fatalf("err = %v, want ErrAuthFailed", err)
		}
	})
	t.Run("swapped tag from another payload", func(t *testing.T) {
		t.Parallel()
		other, err := k.Encrypt([]byte(`{"amount":100,"to":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _, otherTag := fields(t, other)
		if _, err := k.Decrypt(build(ct, iv, otherTag)); !errors.Is(err, ErrAuthFailed) {
			t.Fatalf("err = %v, want ErrAuthFailed", err)
		}
	})
}

func TestWrongKey(t *testing.T) {
	t.Parallel()
	other, err := ParseKey(otherTestKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Decrypt([]byte(katEnvelope)); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("err = %v, want ErrAuthFailed", err)
	}
	env, err := setup(t).Encrypt([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup(t).Decrypt(env); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("random keys: err = %v, want ErrAuthFailed", err)
	}
}

func TestBadEnvelope(t *testing.T) {
	t.Parallel()
	k, err := ParseKey(katKey)
	if err != nil {
		t.Fatal(err)
	}
	iv16, tag16 := base64.StdEncoding.EncodeToString(make([]byte, 16)), base64.StdEncoding.EncodeToString(make([]byte, 16))
	iv12 := base64.StdEncoding.EncodeToString(make([]byte, 12))
	tests := []struct {
		name string
		env  string
	}{
		{"empty", ""},
		{"not JSON", "hello"},
		{"JSON null", "null"},
		{"array", `["a","b","c"]`},
		{"plain payload", `{"orderId":1}`},
		{"missing encrypted", `{"iv":"` + iv16 + `","authTag":"` + tag16 + `"}`},
		{"missing iv", `{"encrypted":"","authTag":"` + tag16 + `"}`},
		{"missing authTag", `{"encrypted":"","iv":"` + iv16 + `"}`},
		{"null field", `{"encrypted":null,"iv":"` + iv16 + `","authTag":"` + tag16 + `"}`},
		{"number field", `{"encrypted":1,"iv":"` + iv16 + `","authTag":"` + tag16 + `"}`},
		{"bad base64", `{"encrypted":"!!!","iv":"` + iv16 + `","authTag":"` + tag16 + `"}`},
		{"12-byte iv", `{"encrypted":"","iv":"` + iv12 + `","authTag":"` + tag16 + `"}`},
		{"short tag", `{"encrypted":"","iv":"` + iv16 + `","authTag":"` + iv12 + `"}`},
		{"trailing data", katEnvelope + "{}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := k.Decrypt([]byte(tt.env)); !errors.Is(err, ErrBadEnvelope) {
				t.Fatalf("err = %v, want ErrBadEnvelope", err)
			}
		})
	}
}

// FuzzDecrypt: no input panics; every failure is one of the two sentinels.
func FuzzDecrypt(f *testing.F) {
	f.Add([]byte(katEnvelope))
	f.Add([]byte(`{"encrypted":"","iv":"AAAAAAAAAAAAAAAAAAAAAA==","authTag":"AAAAAAAAAAAAAAAAAAAAAA=="}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	k, err := ParseKey(katKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, env []byte) {
		plain, err := k.Decrypt(env)
		if err != nil {
			if !errors.Is(err, ErrBadEnvelope) && !errors.Is(err, ErrAuthFailed) {
				t.Fatalf("err = %v", err)
			}
			return
		}
		again, err := k.Decrypt(env)
		if err != nil || !bytes.Equal(plain, again) {
			t.Fatalf("second Decrypt differs: %v", err)
		}
	})
}
