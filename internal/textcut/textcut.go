// Package textcut shortens text for storage and display without cutting a
// UTF-8 character in two.
package textcut

import "unicode/utf8"

// Prefix returns the longest prefix of s that is at most n bytes long and
// does not end inside a UTF-8 encoded character: s itself when it is no
// longer than n, "" when n <= 0. Bytes that are not valid UTF-8 count as
// characters of their own.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
