package fastapi

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/queenmq/queen-go/internal/ratelog"
)

// fasthttpLogger is fasthttp's Server.Logger: its own lines (a connection
// that failed mid-request, too many connections, accept errors) go through
// the broker's slog logger at warn level instead of straight to stderr,
// with every credential redacted (redact), and rate-limited per kind of
// line (ratelog: a client sending garbage in a loop cannot flood the log).
//
// The slog message is "http: " and the text of fasthttp's format up to its
// first verb ("http: error when serving connection"), which also keys the
// rate limit; the whole redacted line is the "detail" attribute.
type fasthttpLogger struct{ log *ratelog.Logger }

// Printf implements fasthttp.Logger.
func (l fasthttpLogger) Printf(format string, args ...any) {
	kind, _, _ := strings.Cut(format, "%")
	kind = strings.TrimRight(strings.TrimSpace(kind), ":,")
	l.log.Warn("http: "+kind, "detail", redact(fmt.Sprintf(format, args...)))
}

// Redaction rules. Log text may hold a request head raw (CR LF line ends)
// or quoted by %q (the two characters \r\n), so a header value ends at
// either spelling of a line end; a quote does not end it (a cookie value may
// hold one), so over-long values over-redact rather than leak.
var (
	// credentialHeader matches a header that carries a credential, its colon
	// and its value: Authorization, Proxy-Authorization, Cookie, Set-Cookie
	// and the common API-key headers.
	credentialHeader = regexp.MustCompile(`(?i)(authorization|cookie|x-api-key|api-key|x-auth-token|x-access-token|x-amz-security-token)(\s*:\s*)(?:[^\r\n\\]|\\[^rn])*`)
	// credentialParam matches a query or form parameter whose name says it
	// holds a secret (token=, access_token=, apiKey=, password=, sig=...).
	credentialParam = regexp.MustCompile(`(?i)([?&;\s"'(]|^)([\w.-]*(?:token|secret|passw|pwd|apikey|api_key|api-key|auth|sig|session|jwt|credential)[\w.-]*=)[^&\s"'\\#)]*`)
	// schemeCredential matches a credential after an HTTP auth scheme
	// anywhere (a header name lost to truncation, an error quoting a value).
	schemeCredential = regexp.MustCompile(`(?i)(bearer|basic|digest)(\s+)[A-Za-z0-9._~+/=-]+`)
	// jwtLike matches a compact JWS anywhere: base64url header starting
	// {" (eyJ), payload, signature.
	jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
)

// redacted replaces every credential redact finds.
const redacted = "[REDACTED]"

// redact returns s with credentials replaced by [REDACTED]: the values of
// credential headers (credentialHeader), secret-looking query parameters
// (credentialParam), anything after Bearer/Basic/Digest, and JWT-shaped
// strings. It errs on the side of removing too much. Every line fasthttp
// logs passes through it; no credential may reach a log.
func redact(s string) string {
	s = credentialHeader.ReplaceAllString(s, "${1}${2}"+redacted)
	s = credentialParam.ReplaceAllString(s, "${1}${2}"+redacted)
	s = schemeCredential.ReplaceAllString(s, "${1}${2}"+redacted)
	return jwtLike.ReplaceAllString(s, redacted)
}
