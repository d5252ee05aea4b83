// Package auth is the broker's optional JWT authentication and role-based
// authorization, compatible with Queen's (the roles and the route policy:
// docs/api.md, Conventions, "Auth"; docs/operations.md, Authentication).
//
// A Verifier checks a bearer token's signature with the configured algorithm
// (HS256 with a shared secret, RS256 or EdDSA with a PEM public key or a JWKS
// URL, or "auto" for any of those that have a key), its exp/nbf/iat with a
// clock skew leeway (exp is required unless configured otherwise), and
// iss/aud when configured. A token with a "crit" header is refused: this
// verifier understands no JWS extension (RFC 7515 §4.1.11). The roles claims become a
// Principal whose capabilities (Read, Write, Admin) are checked against the
// route policy in Required. Middleware wires this into fasthttp.
package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"
	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// Sentinel errors.
var (
	// ErrMissingToken is returned by Verify for an empty token; the middleware
	// answers 401 {"error":"authentication required"}.
	ErrMissingToken = errors.New("auth: authentication required")
	// ErrInvalidToken is returned (wrapped, with a reason that never contains
	// the token or a key) by Verify when the token is malformed, badly
	// signed, signed with an algorithm that is not allowed, expired, not yet
	// valid, issued in the future (iat beyond the clock skew), without exp
	// (unless Config.AllowMissingExp), with a "crit" header
	// (ErrCriticalHeader), or has the wrong issuer or audience. errors.Is also matches the
	// golang-jwt sentinel behind it (jwt.ErrTokenExpired, ...). The middleware
	// answers 401 {"error":"invalid token: <reason>"}.
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrInsufficientRole is returned by Principal.Require when the token's
	// roles do not grant what a route needs; the middleware answers 403
	// {"error":"insufficient permissions"}.
	ErrInsufficientRole = errors.New("auth: insufficient permissions")
	// ErrInvalidConfig is returned (wrapped with the reason) by ConfigFromEnv
	// and New for a malformed value or an unusable combination of settings.
	ErrInvalidConfig = errors.New("auth: invalid configuration")
	// ErrDisabled is returned by Verify when authentication is disabled.
	ErrDisabled = errors.New("auth: authentication is disabled")
	// ErrCriticalHeader is the cause (behind ErrInvalidToken) when a
	// correctly signed token carries a "crit" header: it names extensions
	// the recipient must understand, and this verifier understands none
	// (RFC 7515 §4.1.11).
	ErrCriticalHeader = errors.New("auth: unsupported critical header")
)

// Algorithm names accepted in Config.Algorithm (JWT_ALGORITHM).
const (
	// AlgHS256 is HMAC-SHA256 with Config.Secret.
	AlgHS256 = "HS256"
	// AlgRS256 is RSA PKCS#1 v1.5 with SHA-256, with Config.PublicKeyPEM or
	// the JWKS.
	AlgRS256 = "RS256"
	// AlgEdDSA is Ed25519, with Config.PublicKeyPEM or the JWKS.
	AlgEdDSA = "EdDSA"
	// AlgAuto accepts each of the above for which a key is configured; the
	// token's "alg" header picks one, and the key must be of that kind.
	AlgAuto = "auto"
)

// Defaults, applied by ConfigFromEnv for unset variables and by New where a
// field is zero (except ClockSkew; see Config).
const (
	DefaultAlgorithm              = AlgHS256
	DefaultJWKSRefreshInterval    = 3600 * time.Second
	DefaultJWKSTimeout            = 5000 * time.Millisecond
	DefaultJWKSMinRefreshInterval = 10 * time.Second
	DefaultClockSkew              = 30 * time.Second
	// DefaultSkipPaths: the health check and both metrics routes. Queen's
	// default also lists "/"; under this broker's rule an entry ending in
	// "/" is a prefix, so "/" would serve every route without a token, and
	// the console's files are public without it (docs/console.md).
	DefaultSkipPaths       = "/health,/metrics,/metrics/prometheus"
	DefaultRolesClaim      = "role"
	DefaultRolesArrayClaim = "roles"
)

// Config configures authentication. Build it with ConfigFromEnv, or by hand:
// New applies the defaults to zero fields as documented per field.
type Config struct {
	// Enabled turns authentication on (JWT_ENABLED, true only for "true").
	// When false every other field is ignored and the middleware passes
	// every request through. Default false.
	Enabled bool
	// Algorithm is one of AlgHS256, AlgRS256, AlgEdDSA, AlgAuto
	// (JWT_ALGORITHM). Default HS256 ("" means the default).
	Algorithm string
	// Secret is the HMAC key for HS256 (JWT_SECRET). Required when Algorithm
	// is HS256; with "auto" it enables HS256. Never logged or echoed.
	Secret string
	// PublicKeyPEM is a PEM public key (JWT_PUBLIC_KEY): "PUBLIC KEY" (PKIX,
	// RSA or Ed25519), "RSA PUBLIC KEY" (PKCS#1) or a "CERTIFICATE". A value
	// with literal `\n` sequences and no real newline (as env files often
	// carry it) is unescaped first. It must be RSA for RS256 and Ed25519 for
	// EdDSA. Used for tokens without a "kid" header, or for all tokens when
	// JWKSURL is empty.
	PublicKeyPEM string
	// JWKSURL is an http(s) URL serving a JSON Web Key Set (JWT_JWKS_URL).
	// Tokens with a "kid" header are verified with the JWKS key of that id.
	// The set is fetched once by New (which fails if that fetch fails), then
	// every JWKSRefreshInterval, and on a token with an unknown kid at most
	// once per JWKSMinRefreshInterval. Only RSA and Ed25519 keys with "use"
	// absent or "sig" are used; symmetric JWKS keys never are.
	JWKSURL string
	// JWKSRefreshInterval is how often the JWKS is refetched
	// (JWT_JWKS_REFRESH_INTERVAL, in seconds). Default 3600 s.
	JWKSRefreshInterval time.Duration
	// JWKSTimeout bounds one JWKS fetch (JWT_JWKS_TIMEOUT_MS, in
	// milliseconds). Default 5000 ms.
	JWKSTimeout time.Duration
	// JWKSMinRefreshInterval is the least time between two refetches caused
	// by unknown kids; a token with an unknown kid within it fails at once
	// without a fetch. No environment variable. Default 10 s.
	JWKSMinRefreshInterval time.Duration
	// Issuer, when not empty, is the required "iss" claim (JWT_ISSUER).
	Issuer string
	// Audience, when not empty, must be in the "aud" claim (JWT_AUDIENCE).
	Audience string
	// ClockSkew is the leeway allowed on exp, nbf and iat (JWT_CLOCK_SKEW,
	// in seconds): a token is accepted until exp + ClockSkew, from
	// nbf - ClockSkew, and while its iat is at most ClockSkew in the
	// future. Zero means no leeway: the 30 s default is applied by
	// ConfigFromEnv when the variable is unset, not by New.
	ClockSkew time.Duration
	// AllowMissingExp accepts tokens without an "exp" claim
	// (JWT_REQUIRE_EXP=false). Default false: a token that never expires is
	// refused ("required claim missing"), since a leaked one would be valid
	// forever. A present exp is always checked.
	AllowMissingExp bool
	// SkipPaths are paths served without authentication (JWT_SKIP_PATHS,
	// comma separated). An entry ending in "/" matches every path starting
	// with it; any other entry matches that exact path. nil means
	// DefaultSkipPaths; an empty non-nil slice skips nothing.
	SkipPaths []string
	// RolesClaim is the name of a string claim holding one role
	// (JWT_ROLES_CLAIM). Default "role".
	RolesClaim string
	// RolesArrayClaim is the name of an array-of-strings claim holding roles
	// (JWT_ROLES_ARRAY_CLAIM). Default "roles". A token's roles are the union
	// of both claims; a claim of the wrong type contributes nothing.
	RolesArrayClaim string
	// HTTPClient fetches the JWKS. Default: a client with its own transport
	// and JWKSTimeout as its timeout.
	HTTPClient *http.Client
	// Logger receives JWKS refresh failures. Default slog.Default().
	Logger *slog.Logger
}

// ConfigFromEnv reads the JWT_* variables through getenv (os.Getenv in
// production; an empty value counts as unset). It returns ErrInvalidConfig
// (wrapped with the variable at fault) for a malformed number or boolean, a negative or
// zero duration where a positive one is needed, an unknown algorithm, or,
// when JWT_ENABLED=true, a combination that cannot verify anything (HS256
// without JWT_SECRET, RS256/EdDSA without JWT_PUBLIC_KEY or JWT_JWKS_URL, a
// public key of the wrong type, ...). Malformed values are errors even when
// authentication is disabled.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	c := Config{
		Enabled:         get("JWT_ENABLED") == "true",
		Algorithm:       DefaultAlgorithm,
		Secret:          getenv("JWT_SECRET"),
		PublicKeyPEM:    get("JWT_PUBLIC_KEY"),
		JWKSURL:         get("JWT_JWKS_URL"),
		Issuer:          get("JWT_ISSUER"),
		Audience:        get("JWT_AUDIENCE"),
		RolesClaim:      DefaultRolesClaim,
		RolesArrayClaim: DefaultRolesArrayClaim,
	}
	if v := get("JWT_ALGORITHM"); v != "" {
		c.Algorithm = v
	}
	if v := get("JWT_ROLES_CLAIM"); v != "" {
		c.RolesClaim = v
	}
	if v := get("JWT_ROLES_ARRAY_CLAIM"); v != "" {
		c.RolesArrayClaim = v
	}
	switch v := get("JWT_REQUIRE_EXP"); v {
	case "", "true":
	case "false":
		c.AllowMissingExp = true
	default:
		return Config{}, fmt.Errorf("%w: JWT_REQUIRE_EXP=%q: want true or false", ErrInvalidConfig, v)
	}
	durations := []struct {
		name   string
		unit   time.Duration
		def    time.Duration
		zeroOK bool
		dst    *time.Duration
	}{
		{"JWT_JWKS_REFRESH_INTERVAL", time.Second, DefaultJWKSRefreshInterval, false, &c.JWKSRefreshInterval},
		{"JWT_JWKS_TIMEOUT_MS", time.Millisecond, DefaultJWKSTimeout, false, &c.JWKSTimeout},
		{"JWT_CLOCK_SKEW", time.Second, DefaultClockSkew, true, &c.ClockSkew},
	}
	for _, d := range durations {
		v := get(d.name)
		if v == "" {
			*d.dst = d.def
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || (n == 0 && !d.zeroOK) {
			return Config{}, fmt.Errorf("%w: %s=%q: want a positive integer", ErrInvalidConfig, d.name, v)
		}
		*d.dst = time.Duration(n) * d.unit
	}
	c.SkipPaths = ParseSkipPaths(DefaultSkipPaths)
	if v := get("JWT_SKIP_PATHS"); v != "" {
		c.SkipPaths = ParseSkipPaths(v)
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ParseSkipPaths splits a comma-separated list, trimming spaces and dropping
// empty entries. It never returns nil (a list of only commas skips nothing).
func ParseSkipPaths(list string) []string {
	out := []string{}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// withDefaults returns c with the defaults applied to zero fields.
func (c Config) withDefaults() Config {
	if c.Algorithm == "" {
		c.Algorithm = DefaultAlgorithm
	}
	if c.JWKSRefreshInterval <= 0 {
		c.JWKSRefreshInterval = DefaultJWKSRefreshInterval
	}
	if c.JWKSTimeout <= 0 {
		c.JWKSTimeout = DefaultJWKSTimeout
	}
	if c.JWKSMinRefreshInterval <= 0 {
		c.JWKSMinRefreshInterval = DefaultJWKSMinRefreshInterval
	}
	if c.SkipPaths == nil {
		c.SkipPaths = ParseSkipPaths(DefaultSkipPaths)
	}
	if c.RolesClaim == "" {
		c.RolesClaim = DefaultRolesClaim
	}
	if c.RolesArrayClaim == "" {
		c.RolesArrayClaim = DefaultRolesArrayClaim
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks the algorithm name always, and the key material only when
// authentication is enabled.
func (c Config) validate() error {
	c = c.withDefaults()
	switch c.Algorithm {
	case AlgHS256, AlgRS256, AlgEdDSA, AlgAuto:
	default:
		return fmt.Errorf("%w: JWT_ALGORITHM=%q: want HS256, RS256, EdDSA or auto", ErrInvalidConfig, c.Algorithm)
	}
	if c.ClockSkew < 0 {
		return fmt.Errorf("%w: negative clock skew", ErrInvalidConfig)
	}
	if !c.Enabled {
		return nil
	}
	_, err := c.keys()
	return err
}

// keyMaterial is what a Config resolves to: the allowed algorithms and the
// static keys (the JWKS is set up by New).
type keyMaterial struct {
	methods []string
	secret  []byte
	rsaKey  *rsa.PublicKey
	edKey   ed25519.PublicKey
	jwks    bool
}

// keys resolves and checks the key material for c.Algorithm.
func (c Config) keys() (keyMaterial, error) {
	var km keyMaterial
	if c.Secret != "" && (c.Algorithm == AlgHS256 || c.Algorithm == AlgAuto) {
		km.secret = []byte(c.Secret)
	}
	if c.JWKSURL != "" && c.Algorithm != AlgHS256 {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return km, fmt.Errorf("%w: JWT_JWKS_URL: want an http(s) URL", ErrInvalidConfig)
		}
		km.jwks = true
	}
	if c.PublicKeyPEM != "" && c.Algorithm != AlgHS256 {
		pub, err := parsePublicKeyPEM(c.PublicKeyPEM)
		if err != nil {
			return km, fmt.Errorf("%w: JWT_PUBLIC_KEY: %v", ErrInvalidConfig, err)
		}
		switch k := pub.(type) {
		case *rsa.PublicKey:
			if c.Algorithm == AlgEdDSA {
				return km, fmt.Errorf("%w: JWT_PUBLIC_KEY is an RSA key but JWT_ALGORITHM=EdDSA", ErrInvalidConfig)
			}
			km.rsaKey = k
		case ed25519.PublicKey:
			if c.Algorithm == AlgRS256 {
				return km, fmt.Errorf("%w: JWT_PUBLIC_KEY is an Ed25519 key but JWT_ALGORITHM=RS256", ErrInvalidConfig)
			}
			km.edKey = k
		}
	}
	switch c.Algorithm {
	case AlgHS256:
		if km.secret == nil {
			return km, fmt.Errorf("%w: JWT_ALGORITHM=HS256 needs JWT_SECRET", ErrInvalidConfig)
		}
		km.methods = []string{AlgHS256}
	case AlgRS256, AlgEdDSA:
		if km.rsaKey == nil && km.edKey == nil && !km.jwks {
			return km, fmt.Errorf("%w: JWT_ALGORITHM=%s needs JWT_PUBLIC_KEY or JWT_JWKS_URL", ErrInvalidConfig, c.Algorithm)
		}
		km.methods = []string{c.Algorithm}
	case AlgAuto:
		if km.secret != nil {
			km.methods = append(km.methods, AlgHS256)
		}
		if km.rsaKey != nil || km.jwks {
			km.methods = append(km.methods, AlgRS256)
		}
		if km.edKey != nil || km.jwks {
			km.methods = append(km.methods, AlgEdDSA)
		}
		if len(km.methods) == 0 {
			return km, fmt.Errorf("%w: JWT_ALGORITHM=auto needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL", ErrInvalidConfig)
		}
	}
	return km, nil
}

// parsePublicKeyPEM parses an RSA or Ed25519 public key with golang-jwt's
// PEM helpers.
func parsePublicKeyPEM(s string) (any, error) {
	if !strings.Contains(s, "\n") && strings.Contains(s, `\n`) {
		s = strings.ReplaceAll(s, `\n`, "\n")
	}
	if k, err := jwt.ParseRSAPublicKeyFromPEM([]byte(s)); err == nil {
		return k, nil
	}
	k, err := jwt.ParseEdPublicKeyFromPEM([]byte(s))
	if err != nil {
		return nil, errors.New("not a PEM-encoded RSA or Ed25519 public key")
	}
	return k, nil
}

// Principal is the authenticated caller of a request.
type Principal struct {
	// Sub is the token's "sub" claim ("" when absent). The push route stamps
	// it as the messages' producerSub.
	Sub string
	// Roles are the role names from the roles claims, deduplicated, in claim
	// order (the string claim first). Unknown names are kept but grant
	// nothing.
	Roles []string
	// Caps is the union of what Roles grant (CapsForRoles).
	Caps Capability
}

// Require returns nil if p's capabilities cover need, else ErrInsufficientRole
// (wrapped with what was needed and held). A nil p holds nothing.
func (p *Principal) Require(need Capability) error {
	var have Capability
	if p != nil {
		have = p.Caps
	}
	if !have.Has(need) {
		return fmt.Errorf("%w: need %s, have %s", ErrInsufficientRole, need, have)
	}
	return nil
}

// Verifier verifies tokens and guards routes. Build it with New; it is safe
// for concurrent use. Close stops its JWKS refresh.
type Verifier struct {
	cfg    Config
	km     keyMaterial
	parser *jwt.Parser
	jwks   *jwks // nil without a JWKS URL

	cancel    context.CancelFunc
	closeOnce sync.Once
}

// New validates cfg (ErrInvalidConfig), applies the defaults and builds a
// Verifier. With a JWKS URL it fetches the set before returning (an error if
// that fails) and refreshes it in the background until ctx ends or Close is
// called. With cfg.Enabled false it returns a pass-through Verifier.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	v := &Verifier{cfg: cfg, cancel: func() {}}
	if !cfg.Enabled {
		return v, nil
	}
	km, err := cfg.keys()
	if err != nil {
		return nil, err
	}
	v.km = km
	opts := []jwt.ParserOption{jwt.WithValidMethods(km.methods), jwt.WithLeeway(cfg.ClockSkew), jwt.WithIssuedAt()}
	if !cfg.AllowMissingExp {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	if km.jwks {
		ctx, cancel := context.WithCancel(ctx)
		j, err := newJWKS(ctx, cfg)
		if err != nil {
			cancel()
			return nil, err
		}
		v.jwks, v.cancel = j, cancel
	}
	return v, nil
}

// Enabled reports whether authentication is on.
func (v *Verifier) Enabled() bool { return v.cfg.Enabled }

// Close stops the background JWKS refresh and closes idle connections. It is
// idempotent; Verify keeps working with the last fetched keys.
func (v *Verifier) Close() {
	v.closeOnce.Do(func() {
		v.cancel()
		if v.jwks != nil {
			v.jwks.client.CloseIdleConnections()
		}
	})
}

// Verify checks token (the compact JWS, without "Bearer ") and returns its
// Principal. Errors: ErrDisabled when authentication is off, ErrMissingToken
// for "", and ErrInvalidToken (wrapping the cause) for everything else that
// fails. A valid token without any known role verifies, with Caps 0.
func (v *Verifier) Verify(token string) (*Principal, error) {
	if !v.cfg.Enabled {
		return nil, ErrDisabled
	}
	if token == "" {
		return nil, ErrMissingToken
	}
	claims := jwt.MapClaims{}
	t, err := v.parser.ParseWithClaims(token, claims, v.key)
	if err != nil {
		return nil, &invalidTokenError{reason: reason(err), cause: err}
	}
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515 §4.1.11: a recipient that does not understand every
		// extension "crit" lists must reject the JWS. This verifier
		// implements none, so any "crit" (even an empty or malformed one,
		// which the RFC forbids as well) is refused.
		return nil, &invalidTokenError{reason: "unsupported critical header", cause: ErrCriticalHeader}
	}
	sub, err := claims.GetSubject()
	if err != nil {
		return nil, &invalidTokenError{reason: "invalid subject claim", cause: err}
	}
	p := &Principal{Sub: sub, Roles: v.roles(claims)}
	p.Caps = CapsForRoles(p.Roles)
	return p, nil
}

// roles collects the role names of the string and array claims.
func (v *Verifier) roles(claims jwt.MapClaims) []string {
	var roles []string
	add := func(r string) {
		if r == "" {
			return
		}
		for _, have := range roles {
			if have == r {
				return
			}
		}
		roles = append(roles, r)
	}
	if r, ok := claims[v.cfg.RolesClaim].(string); ok {
		add(r)
	}
	if arr, ok := claims[v.cfg.RolesArrayClaim].([]any); ok {
		for _, e := range arr {
			if r, ok := e.(string); ok {
				add(r)
			}
		}
	}
	return roles
}

// key is the jwt.Keyfunc. The parser has already checked that the token's
// alg is one of v.km.methods; key returns only a key of the matching kind,
// so no algorithm can be verified with another algorithm's key.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	switch t.Method {
	case jwt.SigningMethodHS256:
		if v.km.secret == nil {
			return nil, errNoKey
		}
		return v.km.secret, nil
	case jwt.SigningMethodRS256, jwt.SigningMethodEdDSA:
		_, hasKID := t.Header["kid"]
		var static any
		if t.Method == jwt.SigningMethodRS256 && v.km.rsaKey != nil {
			static = v.km.rsaKey
		} else if t.Method == jwt.SigningMethodEdDSA && v.km.edKey != nil {
			static = v.km.edKey
		}
		if v.jwks != nil && (hasKID || static == nil) {
			return v.jwks.key(t)
		}
		if static == nil {
			return nil, errNoKey
		}
		return static, nil
	}
	return nil, errNoKey
}

// Internal causes wrapped in an invalidTokenError.
var (
	errNoKey      = errors.New("no key for the token's algorithm")
	errUnknownKID = errors.New("unknown key id")
)

// invalidTokenError is what Verify returns for a bad token. Its message holds
// only a fixed reason, never text from the token or a key; errors.Is matches
// ErrInvalidToken and, through Unwrap, the golang-jwt cause.
type invalidTokenError struct {
	reason string
	cause  error
}

func (e *invalidTokenError) Error() string        { return ErrInvalidToken.Error() + ": " + e.reason }
func (e *invalidTokenError) Unwrap() error        { return e.cause }
func (e *invalidTokenError) Is(target error) bool { return target == ErrInvalidToken }

// reason maps a golang-jwt error to a short fixed text safe to show a client.
func reason(err error) string {
	for _, r := range []struct {
		err error
		msg string
	}{
		{jwt.ErrTokenMalformed, "malformed token"},
		{errUnknownKID, "unknown key id"},
		{errNoKey, "no key for the token's algorithm"},
		{jwt.ErrTokenUnverifiable, "unverifiable token"},
		{jwt.ErrTokenSignatureInvalid, "signature is invalid or algorithm not allowed"},
		{jwt.ErrTokenExpired, "token is expired"},
		{jwt.ErrTokenNotValidYet, "token is not valid yet"},
		{jwt.ErrTokenUsedBeforeIssued, "token used before issued"},
		{jwt.ErrTokenInvalidIssuer, "invalid issuer"},
		{jwt.ErrTokenInvalidAudience, "invalid audience"},
		{jwt.ErrTokenRequiredClaimMissing, "required claim missing"},
		{jwt.ErrTokenInvalidClaims, "invalid claims"},
	} {
		if errors.Is(err, r.err) {
			return r.msg
		}
	}
	return "verification failed"
}

// ContextKey is the type of the request user-value key the middleware uses.
type ContextKey string

// PrincipalKey is the fasthttp user-value key under which Middleware stores
// the request's *Principal. Use PrincipalFrom to read it.
const PrincipalKey ContextKey = "auth.principal"

// PrincipalFrom returns the Principal Middleware stored on ctx, or nil when
// authentication is off or the path was skipped.
func PrincipalFrom(ctx *fasthttp.RequestCtx) *Principal {
	p, _ := ctx.UserValue(PrincipalKey).(*Principal)
	return p
}

// Middleware guards next. When authentication is disabled it returns next
// unchanged. Otherwise each request goes through Authorize: refused ones
// are answered there, the others reach next with the *Principal stored
// under PrincipalKey (none for OPTIONS and skipped paths).
func (v *Verifier) Middleware(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if !v.cfg.Enabled {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		p, ok := v.Authorize(ctx)
		if !ok {
			return
		}
		if p != nil {
			ctx.SetUserValue(PrincipalKey, p)
		}
		next(ctx)
	}
}

// Authorize decides a request from its headers alone (so it also serves
// the answer to "Expect: 100-continue", before any body is read). OPTIONS
// requests and Config.SkipPaths pass with a nil Principal; every other
// request needs a token in "Authorization: Bearer <token>" (a bare token is
// accepted too). A refused request has been answered, as JSON with CORS
// headers, and false is returned:
//
//	401 {"error":"authentication required"}    no token
//	401 {"error":"invalid token: <reason>"}    Verify failed (reason from a fixed list)
//	403 {"error":"insufficient permissions"}   the roles do not cover Required(method, path)
//
// The policy is checked on both the path as sent (what fasthttp/router routes
// on) and the normalized path, and the stricter applies; a skip path must
// match both. With authentication disabled every request passes (nil, true).
func (v *Verifier) Authorize(ctx *fasthttp.RequestCtx) (*Principal, bool) {
	if !v.cfg.Enabled {
		return nil, true
	}
	method := string(ctx.Method())
	orig, norm := string(ctx.Request.URI().PathOriginal()), string(ctx.Path())
	if method == fasthttp.MethodOptions || (v.skip(norm) && (orig == norm || v.skip(orig))) {
		return nil, true
	}
	p, err := v.Verify(bearerToken(ctx))
	if err != nil {
		var ite *invalidTokenError
		if errors.As(err, &ite) {
			ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer error="invalid_token"`)
			writeError(ctx, fasthttp.StatusUnauthorized, "invalid token: "+ite.reason)
			return nil, false
		}
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, "Bearer")
		writeError(ctx, fasthttp.StatusUnauthorized, "authentication required")
		return nil, false
	}
	need := Required(method, norm)
	if orig != norm { // both spellings must pass (a %2F must not dodge the policy)
		need |= Required(method, orig)
	}
	if p.Require(need) != nil {
		writeError(ctx, fasthttp.StatusForbidden, "insufficient permissions")
		return nil, false
	}
	return p, true
}

// skip reports whether path matches Config.SkipPaths.
func (v *Verifier) skip(path string) bool {
	for _, s := range v.cfg.SkipPaths {
		if strings.HasSuffix(s, "/") {
			if strings.HasPrefix(path, s) {
				return true
			}
		} else if path == s {
			return true
		}
	}
	return false
}

// bearerToken returns the token of the Authorization header: the part after
// a case-insensitive "Bearer " scheme, or the whole value when it has none.
func bearerToken(ctx *fasthttp.RequestCtx) string {
	h := strings.TrimSpace(string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)))
	switch {
	case strings.EqualFold(h, "bearer"):
		return ""
	case len(h) >= 7 && strings.EqualFold(h[:7], "bearer "):
		return strings.TrimSpace(h[7:])
	}
	return h
}

// writeError answers {"error": msg} with CORS headers, like the fastapi
// package does.
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}
