package fastapi

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// requireIdentity answers 415 Unsupported Media Type, with a JSON error and
// "Accept-Encoding: identity" (RFC 7694), for a request whose
// Content-Encoding is anything but absent or "identity": the broker reads
// bodies as sent and decompresses nothing, so a gzip body would otherwise
// be judged as (malformed) JSON. Decision recorded in docs/api.md.
func requireIdentity(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ce := bytes.TrimSpace(ctx.Request.Header.Peek(fasthttp.HeaderContentEncoding))
		if len(ce) > 0 && !bytes.EqualFold(ce, []byte("identity")) {
			ctx.Response.Header.Set(fasthttp.HeaderAcceptEncoding, "identity")
			writeErr(ctx, fasthttp.StatusUnsupportedMediaType,
				fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed", ce))
			return
		}
		next(ctx)
	}
}

// shapeError turns a decoding error of valid JSON into a message naming
// the field and the type it needs, e.g. `"enabled" must be a boolean, not
// a string` or `"acknowledgments[0].transactionId" must be a string, not
// a number`.
func shapeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("body does not have the expected shape: %v", err)
	}
	field := te.Field
	if field == "" {
		return fmt.Errorf("body must be %s, not %s", kindName(te.Type), article(te.Value))
	}
	parts := strings.Split(field, ".")
	var b strings.Builder
	for i, p := range parts {
		if isIndex(p) {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	want, got := kindName(te.Type), article(te.Value)
	switch {
	case want == got:
		// A number that does not fit a float field (1e400).
		return fmt.Errorf("%q is out of range for %s", b.String(), want)
	case want == "an integer" && got == "a number":
		// The decoder does not say which: a fraction (1.5), an exponent
		// (1e2), or a whole number outside the field's type (300 for a
		// byte, -1 for an unsigned count, 2^64).
		return fmt.Errorf("%q must be a whole number (no fraction or exponent) within the field's range", b.String())
	}
	return fmt.Errorf("%q must be %s, not %s", b.String(), want, got)
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// kindName names the JSON kind a Go type decodes from.
func kindName(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

// article puts "a"/"an" before a JSON kind as the decoder names it
// ("string", "number", "object", "array", "bool"...).
func article(v string) string {
	switch v {
	case "":
		return "another type"
	case "bool":
		return "a boolean"
	case "object", "array", "integer":
		return "an " + v
	}
	if strings.HasPrefix(v, "number") {
		return "a number"
	}
	return "a " + v
}
