package textcut

import (
	"testing"
	"unicode/utf8"
)

// TestPrefix: a prefix within n bytes, never ending inside a character.
func TestPrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 3, "abc"},
		{"abc", 2, "ab"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"aé", 2, "a"},   // é is 2 bytes
		{"a€b", 3, "a"},  // € is 3 bytes
		{"a€b", 4, "a€"}, // ends right after it
		{"€€", 1, ""},
		{"a\xffb", 2, "a\xff"}, // an invalid byte is a character of its own
	} {
		got := Prefix(c.s, c.n)
		if got != c.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
		if utf8.ValidString(c.s) && !utf8.ValidString(got) {
			t.Errorf("Prefix(%q, %d) = %q is not valid UTF-8", c.s, c.n, got)
		}
	}
}
