package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/router"
	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testKeys are generated once per test binary (RSA generation is slow).
type testKeys struct {
	secret       string
	rsa, rsa2    *rsa.PrivateKey
	ed, ed2      ed25519.PrivateKey
	rsaPEM       string // PKIX "PUBLIC KEY" of rsa
	rsaPKCS1PEM  string // "RSA PUBLIC KEY" of rsa
	edPEM        string // PKIX "PUBLIC KEY" of ed
	otherRSAPEM  string // of rsa2
	otherEdPEM   string // of ed2
	secretOther  string
	rsaPEMEscape string // rsaPEM with literal \n, as env files carry it
}

var keysOnce = sync.OnceValue(func() *testKeys {
	k := &testKeys{}
	sec := make([]byte, 32)
	if _, err := rand.Read(sec); err != nil {
		panic(err)
	}
	k.secret = base64.StdEncoding.EncodeToString(sec)
	k.secretOther = k.secret + "x"
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.rsa2, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if _, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		panic(err)
	}
	if _, k.ed2, err = ed25519.GenerateKey(rand.Reader); err != nil {
		panic(err)
	}
	pkix := func(pub any) string {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			panic(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	k.rsaPEM = pkix(&k.rsa.PublicKey)
	k.otherRSAPEM = pkix(&k.rsa2.PublicKey)
	k.edPEM = pkix(k.ed.Public())
	k.otherEdPEM = pkix(k.ed2.Public())
	k.rsaPKCS1PEM = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY",
		Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)}))
	k.rsaPEMEscape = strings.ReplaceAll(strings.TrimSpace(k.rsaPEM), "\n", `\n`)
	return k
})

// sign makes a token. kid is set in the header when not empty.
func sign(t *testing.T, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

// claims returns valid claims (sub, exp in an hour) plus extra.
func claims(extra jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "role": "read-write"}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

// newVerifier builds an enabled Verifier closed at the end of the test.
func newVerifier(t *testing.T, cfg Config) *Verifier {
	t.Helper()
	cfg.Enabled = true
	v, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// jwksServer serves a JWK Set on 127.0.0.1 and counts the fetches.
type jwksServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	keys   []map[string]string
	status int
	hits   atomic.Int64
	fetch  chan struct{} // one send (non-blocking) per fetch
}

func newJWKSServer(t *testing.T, keys ...map[string]string) *jwksServer {
	t.Helper()
	s := &jwksServer{keys: keys, status: http.StatusOK, fetch: make(chan struct{}, 64)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		body, _ := json.Marshal(map[string]any{"keys": s.keys})
		status := s.status
		s.mu.Unlock()
		s.hits.Add(1)
		select {
		case s.fetch <- struct{}{}:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *jwksServer) set(keys ...map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = keys
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func rsaJWK(kid string, k *rsa.PrivateKey) map[string]string {
	return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
		"n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
}

func edJWK(kid string, k ed25519.PrivateKey) map[string]string {
	return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig",
		"x": b64u(k.Public().(ed25519.PublicKey))}
}

func waitOrTimeout[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting")
		panic("unreachable")
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	defaults := Config{
		Algorithm: AlgHS256, JWKSRefreshInterval: time.Hour, JWKSTimeout: 5 * time.Second,
		ClockSkew: 30 * time.Second, SkipPaths: []string{"/health", "/metrics", "/metrics/prometheus"},
		RolesClaim: "role", RolesArrayClaim: "roles",
	}
	with := func(f func(*Config)) Config { c := defaults; f(&c); return c }
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr bool
	}{
		{name: "unset: disabled with defaults", env: nil, want: defaults},
		{name: "enabled only for true", env: map[string]string{"JWT_ENABLED": "TRUE"}, want: defaults},
		{name: "enabled HS256", env: map[string]string{"JWT_ENABLED": "true", "JWT_SECRET": "s3cret"},
			want: with(func(c *Config) { c.Enabled, c.Secret = true, "s3cret" })},
		{name: "everything set", env: map[string]string{
			"JWT_ENABLED": "true", "JWT_ALGORITHM": "auto", "JWT_SECRET": "s", "JWT_PUBLIC_KEY": k.rsaPEM,
			"JWT_JWKS_URL": "https://idp.example/jwks.json", "JWT_JWKS_REFRESH_INTERVAL": "60",
			"JWT_JWKS_TIMEOUT_MS": "250", "JWT_ISSUER": "idp", "JWT_AUDIENCE": "queen", "JWT_CLOCK_SKEW": "0",
			"JWT_SKIP_PATHS": " /health , /public/,,", "JWT_ROLES_CLAIM": "grp", "JWT_ROLES_ARRAY_CLAIM": "grps",
		}, want: Config{Enabled: true, Algorithm: AlgAuto, Secret: "s", PublicKeyPEM: strings.TrimSpace(k.rsaPEM),
			JWKSURL: "https://idp.example/jwks.json", JWKSRefreshInterval: time.Minute, JWKSTimeout: 250 * time.Millisecond,
			Issuer: "idp", Audience: "queen", ClockSkew: 0, SkipPaths: []string{"/health", "/public/"},
			RolesClaim: "grp", RolesArrayClaim: "grps"}},
		{name: "skip nothing", env: map[string]string{"JWT_SKIP_PATHS": ","},
			want: with(func(c *Config) { c.SkipPaths = []string{} })},
		{name: "RS256 with escaped PEM", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": k.rsaPEMEscape},
			want: with(func(c *Config) { c.Enabled, c.Algorithm, c.PublicKeyPEM = true, AlgRS256, k.rsaPEMEscape })},
		{name: "RS256 with PKCS1 PEM", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": k.rsaPKCS1PEM},
			want: with(func(c *Config) {
				c.Enabled, c.Algorithm, c.PublicKeyPEM = true, AlgRS256, strings.TrimSpace(k.rsaPKCS1PEM)
			})},
		{name: "EdDSA with JWKS", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA", "JWT_JWKS_URL": "http://127.0.0.1:1/jwks"},
			want: with(func(c *Config) { c.Enabled, c.Algorithm, c.JWKSURL = true, AlgEdDSA, "http://127.0.0.1:1/jwks" })},
		{name: "disabled ignores missing keys", env: map[string]string{"JWT_ALGORITHM": "RS256"},
			want: with(func(c *Config) { c.Algorithm = AlgRS256 })},

		{name: "HS256 without secret", env: map[string]string{"JWT_ENABLED": "true"}, wantErr: true},
		{name: "RS256 without key", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_SECRET": "s"}, wantErr: true},
		{name: "EdDSA with RSA key", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA", "JWT_PUBLIC_KEY": k.rsaPEM}, wantErr: true},
		{name: "RS256 with Ed25519 key", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": k.edPEM}, wantErr: true},
		{name: "bad PEM", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_PUBLIC_KEY": "not a key"}, wantErr: true},
		{name: "bad JWKS URL", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256", "JWT_JWKS_URL": "file:///etc/jwks"}, wantErr: true},
		{name: "auto without keys", env: map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "auto"}, wantErr: true},
		{name: "unknown algorithm", env: map[string]string{"JWT_ALGORITHM": "none"}, wantErr: true},
		{name: "lower-case algorithm", env: map[string]string{"JWT_ALGORITHM": "hs256"}, wantErr: true},
		{name: "exp optional", env: map[string]string{"JWT_REQUIRE_EXP": "false"},
			want: with(func(c *Config) { c.AllowMissingExp = true })},
		{name: "exp required explicitly", env: map[string]string{"JWT_REQUIRE_EXP": "true"}, want: defaults},
		{name: "require exp not a boolean", env: map[string]string{"JWT_REQUIRE_EXP": "no"}, wantErr: true},
		{name: "skew not a number", env: map[string]string{"JWT_CLOCK_SKEW": "30s"}, wantErr: true},
		{name: "negative skew", env: map[string]string{"JWT_CLOCK_SKEW": "-1"}, wantErr: true},
		{name: "zero refresh interval", env: map[string]string{"JWT_JWKS_REFRESH_INTERVAL": "0"}, wantErr: true},
		{name: "bad timeout", env: map[string]string{"JWT_JWKS_TIMEOUT_MS": "fast"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ConfigFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("err = %v, want ErrInvalidConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ConfigFromEnv: %v", err)
			}
			if !configEqual(got, tt.want) {
				t.Fatalf("config\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func configEqual(a, b Config) bool {
	if strings.Join(a.SkipPaths, ",") != strings.Join(b.SkipPaths, ",") || (a.SkipPaths == nil) != (b.SkipPaths == nil) {
		return false
	}
	return a.Enabled == b.Enabled && a.Algorithm == b.Algorithm && a.Secret == b.Secret &&
		a.PublicKeyPEM == b.PublicKeyPEM && a.JWKSURL == b.JWKSURL &&
		a.JWKSRefreshInterval == b.JWKSRefreshInterval && a.JWKSTimeout == b.JWKSTimeout &&
		a.JWKSMinRefreshInterval == b.JWKSMinRefreshInterval && a.Issuer == b.Issuer &&
		a.Audience == b.Audience && a.ClockSkew == b.ClockSkew && a.RolesClaim == b.RolesClaim &&
		a.RolesArrayClaim == b.RolesArrayClaim && a.AllowMissingExp == b.AllowMissingExp && a.HTTPClient == b.HTTPClient && a.Logger == b.Logger
}

func TestConfigErrorDoesNotLeakSecrets(t *testing.T) {
	t.Parallel()
	_, err := ConfigFromEnv(func(k string) string {
		return map[string]string{"JWT_ENABLED": "true", "JWT_ALGORITHM": "RS256",
			"JWT_SECRET": "topsecret", "JWT_PUBLIC_KEY": "-----BEGIN PUBLIC KEY-----\nzzzz\n-----END PUBLIC KEY-----"}[k]
	})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if strings.Contains(err.Error(), "topsecret") || strings.Contains(err.Error(), "zzzz") {
		t.Fatalf("error leaks key material: %v", err)
	}
}

// TestVerifyAlgorithms covers each algorithm and key source, "auto", alg
// none, algorithm confusion and wrong signatures.
func TestVerifyAlgorithms(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	js := newJWKSServer(t, rsaJWK("rsa-1", k.rsa), edJWK("ed-1", k.ed))
	hs := Config{Algorithm: AlgHS256, Secret: k.secret}
	rsPEM := Config{Algorithm: AlgRS256, PublicKeyPEM: k.rsaPEM}
	rsPKCS1 := Config{Algorithm: AlgRS256, PublicKeyPEM: k.rsaPKCS1PEM}
	edPEM := Config{Algorithm: AlgEdDSA, PublicKeyPEM: k.edPEM}
	rsJWKS := Config{Algorithm: AlgRS256, JWKSURL: js.srv.URL}
	edJWKS := Config{Algorithm: AlgEdDSA, JWKSURL: js.srv.URL}
	autoAll := Config{Algorithm: AlgAuto, Secret: k.secret, PublicKeyPEM: k.rsaPEM, JWKSURL: js.srv.URL}
	autoRSA := Config{Algorithm: AlgAuto, PublicKeyPEM: k.rsaPEM}
	autoEd := Config{Algorithm: AlgAuto, PublicKeyPEM: k.edPEM}

	none := func(t *testing.T) string {
		return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil), "")
	}
	hsWith := func(secret string) func(t *testing.T) string {
		return func(t *testing.T) string { return sign(t, jwt.SigningMethodHS256, []byte(secret), claims(nil), "") }
	}
	rs := func(key *rsa.PrivateKey, kid string) func(t *testing.T) string {
		return func(t *testing.T) string { return sign(t, jwt.SigningMethodRS256, key, claims(nil), kid) }
	}
	ed := func(key ed25519.PrivateKey, kid string) func(t *testing.T) string {
		return func(t *testing.T) string { return sign(t, jwt.SigningMethodEdDSA, key, claims(nil), kid) }
	}
	tests := []struct {
		name  string
		cfg   Config
		token func(t *testing.T) string
		ok    bool
		cause error // a golang-jwt sentinel the error must match, when not ok
	}{
		{"HS256", hs, hsWith(k.secret), true, nil},
		{"HS256 wrong secret", hs, hsWith(k.secretOther), false, jwt.ErrTokenSignatureInvalid},
		{"HS256 config refuses RS256", hs, rs(k.rsa, ""), false, jwt.ErrTokenSignatureInvalid},
		{"HS256 config refuses HS512", hs, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS512, []byte(k.secret), claims(nil), "")
		}, false, jwt.ErrTokenSignatureInvalid},
		{"HS256 alg none", hs, none, false, jwt.ErrTokenSignatureInvalid},

		{"RS256 PEM", rsPEM, rs(k.rsa, ""), true, nil},
		{"RS256 PEM ignores kid without JWKS", rsPEM, rs(k.rsa, "whatever"), true, nil},
		{"RS256 PKCS1 PEM", rsPKCS1, rs(k.rsa, ""), true, nil},
		{"RS256 wrong key", rsPEM, rs(k.rsa2, ""), false, jwt.ErrTokenSignatureInvalid},
		{"RS256 refuses RS384", rsPEM, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodRS384, k.rsa, claims(nil), "")
		}, false, jwt.ErrTokenSignatureInvalid},
		{"RS256 alg none", rsPEM, none, false, jwt.ErrTokenSignatureInvalid},
		{"RS256 confusion: HS256 signed with the public PEM", rsPEM, hsWith(k.rsaPEM), false, jwt.ErrTokenSignatureInvalid},
		{"RS256 refuses EdDSA", rsPEM, ed(k.ed, ""), false, jwt.ErrTokenSignatureInvalid},

		{"EdDSA PEM", edPEM, ed(k.ed, ""), true, nil},
		{"EdDSA wrong key", edPEM, ed(k.ed2, ""), false, jwt.ErrTokenSignatureInvalid},
		{"EdDSA refuses RS256", edPEM, rs(k.rsa, ""), false, jwt.ErrTokenSignatureInvalid},
		{"EdDSA confusion: HS256 signed with the public PEM", edPEM, hsWith(k.edPEM), false, jwt.ErrTokenSignatureInvalid},

		{"RS256 JWKS by kid", rsJWKS, rs(k.rsa, "rsa-1"), true, nil},
		{"RS256 JWKS without kid", rsJWKS, rs(k.rsa, ""), true, nil},
		{"RS256 JWKS kid of an Ed25519 key", rsJWKS, rs(k.rsa, "ed-1"), false, jwt.ErrTokenUnverifiable},
		{"RS256 JWKS wrong key under a known kid", rsJWKS, rs(k.rsa2, "rsa-1"), false, jwt.ErrTokenSignatureInvalid},
		{"EdDSA JWKS by kid", edJWKS, ed(k.ed, "ed-1"), true, nil},
		{"EdDSA JWKS without kid", edJWKS, ed(k.ed, ""), true, nil},
		{"EdDSA JWKS wrong key", edJWKS, ed(k.ed2, "ed-1"), false, jwt.ErrTokenSignatureInvalid},
		{"JWKS confusion: HS256 under an RSA kid", rsJWKS, func(t *testing.T) string {
			return sign(t, jwt.SigningMethodHS256, k.rsa.N.Bytes(), claims(nil), "rsa-1")
		}, false, jwt.ErrTokenSignatureInvalid},

		{"auto HS256", autoAll, hsWith(k.secret), true, nil},
		{"auto RS256 static", autoAll, rs(k.rsa, ""), true, nil},
		{"auto RS256 JWKS", autoAll, rs(k.rsa, "rsa-1"), true, nil},
		{"auto EdDSA JWKS", autoAll, ed(k.ed, "ed-1"), true, nil},
		{"auto alg none", autoAll, none, false, jwt.ErrTokenSignatureInvalid},
		{"auto confusion with a secret: HS256 signed with the public PEM", autoAll, hsWith(k.rsaPEM), false, jwt.ErrTokenSignatureInvalid},
		{"auto without secret refuses HS256", autoRSA, hsWith(k.rsaPEM), false, jwt.ErrTokenSignatureInvalid},
		{"auto RSA key refuses EdDSA", autoRSA, ed(k.ed, ""), false, jwt.ErrTokenSignatureInvalid},
		{"auto Ed25519 key", autoEd, ed(k.ed, ""), true, nil},
		{"auto Ed25519 key refuses RS256", autoEd, rs(k.rsa, ""), false, jwt.ErrTokenSignatureInvalid},

		{"tampered payload", hs, func(t *testing.T) string {
			parts := strings.Split(hsWith(k.secret)(t), ".")
			parts[1] = b64u([]byte(`{"sub":"mallory","role":"admin"}`))
			return strings.Join(parts, ".")
		}, false, jwt.ErrTokenSignatureInvalid},
		{"garbage", hs, func(*testing.T) string { return "not.a.jwt" }, false, jwt.ErrTokenMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newVerifier(t, tt.cfg)
			p, err := v.Verify(tt.token(t))
			if tt.ok {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.Sub != "alice" || p.Caps != Read|Write {
					t.Fatalf("principal = %+v", p)
				}
				return
			}
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Fatalf("err = %v (%v), want it to match %v", err, errors.Unwrap(err), tt.cause)
			}
		})
	}
}

func TestVerifyTimeClaims(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	now := time.Now()
	tests := []struct {
		name  string
		skew  time.Duration
		extra jwt.MapClaims
		want  error // nil, jwt.ErrTokenExpired or jwt.ErrTokenNotValidYet
	}{
		{"expired 10s ago, skew 30s", 30 * time.Second, jwt.MapClaims{"exp": now.Add(-10 * time.Second).Unix()}, nil},
		{"expired 10s ago, no skew", 0, jwt.MapClaims{"exp": now.Add(-10 * time.Second).Unix()}, jwt.ErrTokenExpired},
		{"expired 60s ago, skew 30s", 30 * time.Second, jwt.MapClaims{"exp": now.Add(-60 * time.Second).Unix()}, jwt.ErrTokenExpired},
		{"nbf in 10s, skew 30s", 30 * time.Second, jwt.MapClaims{"nbf": now.Add(10 * time.Second).Unix()}, nil},
		{"nbf in 10s, no skew", 0, jwt.MapClaims{"nbf": now.Add(10 * time.Second).Unix()}, jwt.ErrTokenNotValidYet},
		{"nbf in 60s, skew 30s", 30 * time.Second, jwt.MapClaims{"nbf": now.Add(60 * time.Second).Unix()}, jwt.ErrTokenNotValidYet},
		{"no exp", 0, jwt.MapClaims{"exp": nil}, jwt.ErrTokenRequiredClaimMissing},
		{"exp not a number", 30 * time.Second, jwt.MapClaims{"exp": "tomorrow"}, jwt.ErrTokenInvalidClaims},
		{"iat now", 0, jwt.MapClaims{"iat": now.Unix()}, nil},
		{"iat an hour ago", 0, jwt.MapClaims{"iat": now.Add(-time.Hour).Unix()}, nil},
		{"iat in 10s, skew 30s", 30 * time.Second, jwt.MapClaims{"iat": now.Add(10 * time.Second).Unix()}, nil},
		{"iat in 10s, no skew", 0, jwt.MapClaims{"iat": now.Add(10 * time.Second).Unix()}, jwt.ErrTokenUsedBeforeIssued},
		{"iat in 60s, skew 30s", 30 * time.Second, jwt.MapClaims{"iat": now.Add(60 * time.Second).Unix()}, jwt.ErrTokenUsedBeforeIssued},
		{"iat in a year, skew 30s", 30 * time.Second, jwt.MapClaims{"iat": now.Add(365 * 24 * time.Hour).Unix()}, jwt.ErrTokenUsedBeforeIssued},
		{"iat not a number", 30 * time.Second, jwt.MapClaims{"iat": "now"}, jwt.ErrTokenInvalidClaims},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newVerifier(t, Config{Secret: k.secret, ClockSkew: tt.skew})
			_, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(tt.extra), ""))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidToken) || !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want ErrInvalidToken wrapping %v", err, tt.want)
			}
		})
	}
}

// TestVerifyMissingExp: exp is required by default; AllowMissingExp
// (JWT_REQUIRE_EXP=false) accepts a token without one but still checks a
// present exp.
func TestVerifyMissingExp(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	noExp := sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(jwt.MapClaims{"exp": nil}), "")
	expired := sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()}), "")
	strict := newVerifier(t, Config{Secret: k.secret})
	if _, err := strict.Verify(noExp); !errors.Is(err, jwt.ErrTokenRequiredClaimMissing) || err.Error() != "auth: invalid token: required claim missing" {
		t.Fatalf("default, no exp: err = %v, want required claim missing", err)
	}
	lax := newVerifier(t, Config{Secret: k.secret, AllowMissingExp: true})
	if _, err := lax.Verify(noExp); err != nil {
		t.Fatalf("AllowMissingExp, no exp: %v", err)
	}
	if _, err := lax.Verify(expired); !errors.Is(err, jwt.ErrTokenExpired) {
		t.Fatalf("AllowMissingExp, expired: err = %v, want ErrTokenExpired", err)
	}
}

// TestVerifyCriticalHeader: RFC 7515 §4.1.11 says a JWS whose "crit"
// header lists an extension the recipient does not understand must be
// rejected; the verifier understands none, so any crit is refused, even on
// a correctly signed token, for every algorithm.
func TestVerifyCriticalHeader(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	v := newVerifier(t, Config{Algorithm: AlgAuto, Secret: k.secret, PublicKeyPEM: k.edPEM})
	for _, crit := range []any{[]string{"exp"}, []string{"b64"}, []string{"urn:example:x"}, []string{}, "exp", nil} {
		for _, m := range []struct {
			method jwt.SigningMethod
			key    any
		}{{jwt.SigningMethodHS256, []byte(k.secret)}, {jwt.SigningMethodEdDSA, k.ed}} {
			tok := jwt.NewWithClaims(m.method, claims(nil))
			tok.Header["crit"] = crit
			if _, ok := crit.([]string); ok && len(crit.([]string)) > 0 {
				tok.Header[crit.([]string)[0]] = true
			}
			s, err := tok.SignedString(m.key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(s)
			if !errors.Is(err, ErrInvalidToken) || !errors.Is(err, ErrCriticalHeader) {
				t.Errorf("%s crit=%v: err = %v, want ErrInvalidToken wrapping ErrCriticalHeader", m.method.Alg(), crit, err)
			}
			if err != nil && err.Error() != "auth: invalid token: unsupported critical header" {
				t.Errorf("%s crit=%v: message %q", m.method.Alg(), crit, err.Error())
			}
		}
	}
	// The same token without crit verifies (the refusal is the header's).
	if _, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(nil), "")); err != nil {
		t.Fatalf("without crit: %v", err)
	}
}

func TestVerifyIssuerAudience(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	strict := Config{Secret: k.secret, Issuer: "https://idp.example", Audience: "queen"}
	loose := Config{Secret: k.secret}
	tests := []struct {
		name  string
		cfg   Config
		extra jwt.MapClaims
		want  error
	}{
		{"both match", strict, jwt.MapClaims{"iss": "https://idp.example", "aud": "queen"}, nil},
		{"audience in an array", strict, jwt.MapClaims{"iss": "https://idp.example", "aud": []string{"other", "queen"}}, nil},
		{"wrong issuer", strict, jwt.MapClaims{"iss": "https://evil.example", "aud": "queen"}, jwt.ErrTokenInvalidIssuer},
		{"missing issuer", strict, jwt.MapClaims{"aud": "queen"}, jwt.ErrTokenRequiredClaimMissing},
		{"wrong audience", strict, jwt.MapClaims{"iss": "https://idp.example", "aud": "other"}, jwt.ErrTokenInvalidAudience},
		{"missing audience", strict, jwt.MapClaims{"iss": "https://idp.example"}, jwt.ErrTokenRequiredClaimMissing},
		{"not checked when not configured", loose, jwt.MapClaims{"iss": "anyone", "aud": "anything"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newVerifier(t, tt.cfg)
			_, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(tt.extra), ""))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidToken) || !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want ErrInvalidToken wrapping %v", err, tt.want)
			}
		})
	}
}

func TestVerifyRoles(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	tests := []struct {
		name      string
		cfg       Config
		extra     jwt.MapClaims
		wantRoles []string
		wantCaps  Capability
	}{
		{"string claim", Config{}, jwt.MapClaims{"role": "read-only"}, []string{"read-only"}, Read},
		{"array claim", Config{}, jwt.MapClaims{"role": nil, "roles": []string{"write-only"}}, []string{"write-only"}, Write},
		{"union of both claims", Config{}, jwt.MapClaims{"role": "read-only", "roles": []string{"write-only", "read-only"}},
			[]string{"read-only", "write-only"}, Read | Write},
		{"admin", Config{}, jwt.MapClaims{"role": "admin"}, []string{"admin"}, Read | Write | Admin},
		{"unknown roles grant nothing", Config{}, jwt.MapClaims{"role": "superuser", "roles": []string{"Admin", "root"}},
			[]string{"superuser", "Admin", "root"}, 0},
		{"no roles", Config{}, jwt.MapClaims{"role": nil}, nil, 0},
		{"wrong claim types ignored", Config{}, jwt.MapClaims{"role": []string{"admin"}, "roles": "admin"}, nil, 0},
		{"non-string array elements ignored", Config{}, jwt.MapClaims{"role": nil, "roles": []any{1, "read-only", nil}},
			[]string{"read-only"}, Read},
		{"custom claim names", Config{RolesClaim: "grp", RolesArrayClaim: "grps"},
			jwt.MapClaims{"role": "admin", "grp": "read-only", "grps": []string{"write-only"}}, []string{"read-only", "write-only"}, Read | Write},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			cfg.Secret = k.secret
			v := newVerifier(t, cfg)
			p, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(tt.extra), ""))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if strings.Join(p.Roles, ",") != strings.Join(tt.wantRoles, ",") || p.Caps != tt.wantCaps || p.Sub != "alice" {
				t.Fatalf("principal = %+v, want roles %v caps %v", p, tt.wantRoles, tt.wantCaps)
			}
		})
	}
}

func TestVerifySubject(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	v := newVerifier(t, Config{Secret: k.secret})
	p, err := v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(jwt.MapClaims{"sub": nil}), ""))
	if err != nil || p.Sub != "" {
		t.Fatalf("no sub: principal %+v, err %v", p, err)
	}
	_, err = v.Verify(sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(jwt.MapClaims{"sub": 42}), ""))
	if !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("numeric sub: err = %v, want ErrInvalidToken", err)
	}
	if _, err := v.Verify(""); !errors.Is(err, ErrMissingToken) {
		t.Fatalf("empty token: err = %v, want ErrMissingToken", err)
	}
}

func TestCapsForRoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		roles []string
		want  Capability
		str   string
	}{
		{nil, 0, "none"},
		{[]string{"write-only"}, Write, "write"},
		{[]string{"read-only"}, Read, "read"},
		{[]string{"read-write"}, Read | Write, "read|write"},
		{[]string{"admin"}, Read | Write | Admin, "read|write|admin"},
		{[]string{"write-only", "read-only"}, Read | Write, "read|write"},
		{[]string{"write-only", "nobody"}, Write, "write"},
		{[]string{"READ-ONLY"}, 0, "none"},
	}
	for _, tt := range tests {
		if got := CapsForRoles(tt.roles); got != tt.want || got.String() != tt.str {
			t.Errorf("CapsForRoles(%v) = %v (%s), want %v (%s)", tt.roles, got, got, tt.want, tt.str)
		}
	}
	if err := (&Principal{Caps: Write}).Require(Read | Write); !errors.Is(err, ErrInsufficientRole) {
		t.Errorf("Require = %v, want ErrInsufficientRole", err)
	}
	if err := (*Principal)(nil).Require(Read); !errors.Is(err, ErrInsufficientRole) {
		t.Errorf("nil Require = %v, want ErrInsufficientRole", err)
	}
	if err := (&Principal{Caps: Read | Write | Admin}).Require(Read | Write); err != nil {
		t.Errorf("admin Require = %v", err)
	}
}

// roleSets are the token role sets the policy table is checked with, and
// policyAllowed says which of them pass each required level.
var roleSets = []struct {
	name  string
	roles []string
}{
	{"write-only", []string{"write-only"}},
	{"read-only", []string{"read-only"}},
	{"read-write", []string{"read-write"}},
	{"admin", []string{"admin"}},
	{"write-only+read-only", []string{"write-only", "read-only"}},
}

var policyAllowed = map[Capability][5]bool{
	//            write-only read-only read-write admin  wo+ro
	Write:        {true, false, true, true, true},
	Read:         {false, true, true, true, true},
	Read | Write: {false, false, true, true, true},
	Admin:        {false, false, false, true, false},
}

// policyRoutes is the route policy, one example request per pattern.
var policyRoutes = []struct {
	method, path string
	need         Capability
}{
	{"POST", "/api/v1/push", Write},
	{"POST", "/api/v1/push/", Write},
	{"GET", "/api/v1/pop/queue/orders", Read | Write},
	{"GET", "/api/v1/pop/queue/orders/partition/p1", Read | Write},
	{"GET", "/api/v1/pop", Read | Write},
	{"POST", "/api/v1/ack", Read | Write},
	{"POST", "/api/v1/ack/batch", Read | Write},
	{"POST", "/api/v1/lease/0190e0c6-6a5c-7b8e-9f00-000000000001/extend", Read | Write},
	{"POST", "/api/v1/transaction", Read | Write},
	{"POST", "/api/v1/configure", Read | Write},
	{"POST", "/api/v1/consumer-groups/g1/queues/orders/seek", Read | Write},
	{"POST", "/api/v1/consumer-groups/g1/queues/orders/partitions/p1/seek", Read | Write},
	{"POST", "/api/v1/consumer-groups/g1/subscription", Read | Write},

	{"GET", "/api/v1/system/maintenance", Admin},
	{"POST", "/api/v1/system/maintenance", Admin},
	{"GET", "/api/v1/system/maintenance/pop", Admin},
	{"POST", "/api/v1/system/maintenance/pop", Admin},
	{"GET", "/api/v1/system/shared-state", Admin},
	{"DELETE", "/api/v1/system/anything", Admin},
	{"GET", "/api/v1/system", Admin},
	{"DELETE", "/api/v1/resources/queues/orders", Admin},
	{"DELETE", "/api/v1/consumer-groups/g1", Admin},
	{"DELETE", "/api/v1/consumer-groups/g1/queues/orders", Admin},

	{"GET", "/api/v1/resources/queues", Read},
	{"GET", "/api/v1/resources/queues/orders", Read},
	{"GET", "/api/v1/resources/overview", Read},
	{"GET", "/api/v1/messages", Read},
	{"GET", "/api/v1/messages/p1/t1", Read},
	{"GET", "/api/v1/dlq", Read},
	{"GET", "/api/v1/traces/p1/t1", Read},
	{"GET", "/api/v1/consumer-groups", Read},
	{"GET", "/api/v1/consumer-groups/g1", Read},
	{"GET", "/api/v1/status", Read},
	{"GET", "/api/v1/status/buffers", Read},
	{"GET", "/api/v1/analytics/queue-lag", Read},
	{"GET", "/api/v1/status/queues/orders/messages", Read},
	{"GET", "/api/v1/status/analytics", Read},
	{"GET", "/api/v1/analytics/system-metrics", Read},
	{"GET", "/api/v1/analytics/postgres-stats", Read},
	{"GET", "/api/v1/analytics/retention", Read},

	{"POST", "/api/v1/traces", Read | Write},
	{"DELETE", "/api/v1/messages/p1/t1", Read | Write},
	{"POST", "/streams/v1/queries", Read | Write},
	{"POST", "/streams/v1/cycle", Read | Write},
	{"POST", "/streams/v1/state/get", Read},

	// Not listed: deny by default.
	{"DELETE", "/api/v1/messages/p1", Admin},
	{"GET", "/streams/v1/cycle", Admin},
	{"POST", "/streams/v1/unknown", Admin},
	{"POST", "/api/v1/stats/refresh", Admin},
	{"PUT", "/api/v1/push", Admin},
	{"POST", "/api/v1/pop/queue/orders", Admin},
	{"HEAD", "/api/v1/status", Admin},
	{"POST", "/api/v1/lease//extend", Admin},
	{"POST", "/api/v1/consumer-groups/g1/queues/orders/partitions/seek", Admin},
	{"POST", "/api/v1/unknown", Admin},
	{"GET", "/api/v2/status", Admin},
	{"GET", "/api", Admin},
	{"GET", "/api/v1", Admin},
	{"GET", "/internal/api/notify", Admin},
	{"GET", "/", Admin},
}

// TestPolicyTable checks Required for every route pattern, then sends each
// route through the middleware with a token of each role set.
func TestPolicyTable(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	v := newVerifier(t, Config{Secret: k.secret, SkipPaths: []string{}})
	var called atomic.Int64
	h := v.Middleware(func(ctx *fasthttp.RequestCtx) { called.Add(1); ctx.SetStatusCode(fasthttp.StatusOK) })
	for _, rt := range policyRoutes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			t.Parallel()
			if got := Required(rt.method, rt.path); got != rt.need {
				t.Fatalf("Required = %v, want %v", got, rt.need)
			}
			for i, rs := range roleSets {
				tok := sign(t, jwt.SigningMethodHS256, []byte(k.secret),
					claims(jwt.MapClaims{"role": nil, "roles": rs.roles}), "")
				ctx := do(h, rt.method, rt.path, "Bearer "+tok)
				want := fasthttp.StatusForbidden
				if policyAllowed[rt.need][i] {
					want = fasthttp.StatusOK
				}
				if got := ctx.Response.StatusCode(); got != want {
					t.Errorf("%s: status %d, want %d (body %s)", rs.name, got, want, ctx.Response.Body())
				}
			}
		})
	}
}

// do runs h on a request built from method, uri and an Authorization value.
func do(h fasthttp.RequestHandler, method, uri, authz string) *fasthttp.RequestCtx {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	if authz != "" {
		ctx.Request.Header.Set("Authorization", authz)
	}
	h(ctx)
	return ctx
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	v := newVerifier(t, Config{Secret: k.secret, SkipPaths: []string{"/health", "/metrics", "/public/"}})
	next := func(ctx *fasthttp.RequestCtx) {
		p := PrincipalFrom(ctx)
		sub := "<nil>"
		if p != nil {
			sub = p.Sub + ":" + p.Caps.String()
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBodyString("next " + sub)
	}
	h := v.Middleware(next)
	tok := func(extra jwt.MapClaims) string {
		return sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(extra), "")
	}
	writer := tok(jwt.MapClaims{"role": "write-only"})
	reader := tok(jwt.MapClaims{"role": "read-only"})
	expired := tok(jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()})
	forged := sign(t, jwt.SigningMethodHS256, []byte(k.secretOther), claims(nil), "")
	const authRequired = `{"error":"authentication required"}`
	tests := []struct {
		name, method, uri, authz string
		status                   int
		body                     string
	}{
		{"no token", "POST", "/api/v1/push", "", 401, authRequired},
		{"empty bearer", "POST", "/api/v1/push", "Bearer ", 401, authRequired},
		{"malformed", "POST", "/api/v1/push", "Bearer abc.def", 401, `{"error":"invalid token: malformed token"}`},
		{"expired", "POST", "/api/v1/push", "Bearer " + expired, 401, `{"error":"invalid token: token is expired"}`},
		{"forged", "POST", "/api/v1/push", "Bearer " + forged, 401, `{"error":"invalid token: signature is invalid or algorithm not allowed"}`},
		{"insufficient", "POST", "/api/v1/push", "Bearer " + reader, 403, `{"error":"insufficient permissions"}`},
		{"write-only cannot pop", "GET", "/api/v1/pop/queue/q", "Bearer " + writer, 403, `{"error":"insufficient permissions"}`},
		{"pass", "POST", "/api/v1/push", "Bearer " + writer, 200, "next alice:write"},
		{"lower-case scheme", "POST", "/api/v1/push", "bearer " + writer, 200, "next alice:write"},
		{"raw token", "POST", "/api/v1/push", writer, 200, "next alice:write"},
		{"query string ignored", "GET", "/api/v1/status?x=/health", "Bearer " + reader, 200, "next alice:read"},
		{"OPTIONS skips", "OPTIONS", "/api/v1/push", "", 200, "next <nil>"},
		{"skip exact", "GET", "/health", "", 200, "next <nil>"},
		{"skip exact other", "GET", "/metrics", "", 200, "next <nil>"},
		{"exact does not match longer", "GET", "/health/db", "", 401, authRequired},
		{"exact does not match child", "GET", "/metrics/prometheus", "", 401, authRequired},
		{"skip prefix", "GET", "/public/css/app.css", "", 200, "next <nil>"},
		{"prefix needs its slash", "GET", "/public", "", 401, authRequired},
		{"prefix no partial segment", "GET", "/publicity", "", 401, authRequired},
		{"dot-dot out of a skip path", "GET", "/public/../api/v1/system/maintenance", "", 401, authRequired},
		{"encoded dot-dot out of a skip path", "GET", "/public/%2e%2e/api/v1/system/maintenance", "", 401, authRequired},
		{"dot-dot into the admin area", "GET", "/api/v1/status/../system/maintenance", "Bearer " + reader, 403, `{"error":"insufficient permissions"}`},
		{"skip path token ignored", "GET", "/health", "Bearer garbage", 200, "next <nil>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := do(h, tt.method, tt.uri, tt.authz)
			if got := ctx.Response.StatusCode(); got != tt.status {
				t.Fatalf("status %d, want %d (body %s)", got, tt.status, ctx.Response.Body())
			}
			if got := string(ctx.Response.Body()); got != tt.body {
				t.Fatalf("body %s, want %s", got, tt.body)
			}
			if tt.status >= 400 {
				if ct := string(ctx.Response.Header.ContentType()); ct != "application/json" {
					t.Errorf("content type %q", ct)
				}
				if o := string(ctx.Response.Header.Peek("Access-Control-Allow-Origin")); o != "*" {
					t.Errorf("CORS origin %q", o)
				}
				body := string(ctx.Response.Body())
				token := strings.TrimSpace(strings.TrimPrefix(tt.authz, "Bearer "))
				if strings.Contains(body, k.secret) || (token != "" && strings.Contains(body, token)) {
					t.Errorf("body %s echoes the token or the secret", body)
				}
			}
			if tt.status == 401 && len(ctx.Response.Header.Peek("WWW-Authenticate")) == 0 {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestMiddlewareDisabled(t *testing.T) {
	t.Parallel()
	v, err := New(t.Context(), Config{Enabled: false, Algorithm: AlgRS256})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer v.Close()
	if v.Enabled() {
		t.Fatal("Enabled() = true")
	}
	var got *Principal = &Principal{}
	h := v.Middleware(func(ctx *fasthttp.RequestCtx) { got = PrincipalFrom(ctx); ctx.SetStatusCode(204) })
	ctx := do(h, "DELETE", "/api/v1/system/anything", "")
	if ctx.Response.StatusCode() != 204 || got != nil {
		t.Fatalf("status %d, principal %+v; want 204 and nil", ctx.Response.StatusCode(), got)
	}
	if _, err := v.Verify("x"); !errors.Is(err, ErrDisabled) {
		t.Fatalf("Verify = %v, want ErrDisabled", err)
	}
}

// TestMiddlewareWithRouter runs the middleware in front of fasthttp/router:
// route parameters survive, the policy applies.
func TestMiddlewareWithRouter(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	v := newVerifier(t, Config{Secret: k.secret})
	r := router.New()
	r.DELETE("/api/v1/consumer-groups/{group}", func(ctx *fasthttp.RequestCtx) {
		ctx.SetBodyString("deleted " + ctx.UserValue("group").(string) + " by " + PrincipalFrom(ctx).Sub)
	})
	r.GET("/health", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	h := v.Middleware(r.Handler)
	bearer := func(role string) string {
		return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte(k.secret), claims(jwt.MapClaims{"role": role}), "")
	}
	tests := []struct {
		name, method, path, authz string
		status                    int
		body                      string
	}{
		{"admin deletes", "DELETE", "/api/v1/consumer-groups/g1", bearer("admin"), 200, "deleted g1 by alice"},
		{"read-write may not", "DELETE", "/api/v1/consumer-groups/g1", bearer("read-write"), 403, `{"error":"insufficient permissions"}`},
		{"health is public", "GET", "/health", "", 200, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := do(h, tt.method, tt.path, tt.authz)
			if st, body := ctx.Response.StatusCode(), string(ctx.Response.Body()); st != tt.status || body != tt.body {
				t.Fatalf("got %d %s, want %d %s", st, body, tt.status, tt.body)
			}
		})
	}
}

// TestJWKSRotation: a token with a kid the set does not have triggers one
// refetch, rate limited; the new key is then used, and a key dropped from
// the set stops working.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	js := newJWKSServer(t, rsaJWK("k1", k.rsa))
	v := newVerifier(t, Config{Algorithm: AlgAuto, JWKSURL: js.srv.URL, JWKSMinRefreshInterval: time.Hour})
	if n := js.hits.Load(); n != 1 {
		t.Fatalf("fetches after New = %d, want 1", n)
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1")); err != nil {
		t.Fatalf("k1: %v", err)
	}

	js.set(edJWK("k2", k.ed)) // rotation: k1 retired, k2 (Ed25519) new
	p, err := v.Verify(sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), "k2"))
	if err != nil {
		t.Fatalf("k2 after rotation: %v", err)
	}
	if p.Sub != "alice" {
		t.Fatalf("principal %+v", p)
	}
	if n := js.hits.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2", n)
	}
	_, err = v.Verify(sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1"))
	if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "unknown key id") {
		t.Fatalf("retired k1: err = %v, want unknown key id", err)
	}
	// Within the rate limit: no more fetches, even for new kids.
	js.set(edJWK("k2", k.ed), edJWK("k3", k.ed2))
	_, err = v.Verify(sign(t, jwt.SigningMethodEdDSA, k.ed2, claims(nil), "k3"))
	if !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("k3 within the rate limit: err = %v, want ErrInvalidToken", err)
	}
	if n := js.hits.Load(); n != 2 {
		t.Fatalf("fetches = %d, want 2 (rate limited)", n)
	}
}

func TestJWKSUnknownKIDRateLimitExpires(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	js := newJWKSServer(t, rsaJWK("k1", k.rsa))
	v := newVerifier(t, Config{Algorithm: AlgRS256, JWKSURL: js.srv.URL, JWKSMinRefreshInterval: 50 * time.Millisecond})
	bad := sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "nope")
	if _, err := v.Verify(bad); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("unknown kid: %v", err)
	}
	js.set(rsaJWK("k1", k.rsa), rsaJWK("k2", k.rsa2))
	tok := sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k2")
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := v.Verify(tok)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("k2 never accepted: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := js.hits.Load(); n != 3 {
		t.Fatalf("fetches = %d, want 3 (start, unknown kid, unknown kid after the limit)", n)
	}
}

func TestJWKSPeriodicRefresh(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	js := newJWKSServer(t, rsaJWK("k1", k.rsa))
	v := newVerifier(t, Config{Algorithm: AlgRS256, JWKSURL: js.srv.URL,
		JWKSRefreshInterval: 20 * time.Millisecond, JWKSMinRefreshInterval: time.Hour})
	waitOrTimeout(t, js.fetch) // the first fetch, by New
	// Spend the one unknown-kid refetch, so only the periodic refresh is left.
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "spent")); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("unknown kid: %v", err)
	}
	js.set(rsaJWK("k2", k.rsa2))
	// Drain fetches that may have started before the rotation, then wait for one after it.
	for len(js.fetch) > 0 {
		<-js.fetch
	}
	waitOrTimeout(t, js.fetch)
	waitOrTimeout(t, js.fetch)
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "k2")); err != nil {
		t.Fatalf("k2 after a periodic refresh: %v", err)
	}
}

func TestJWKSFirstFetchFails(t *testing.T) {
	t.Parallel()
	js := newJWKSServer(t)
	js.mu.Lock()
	js.status = http.StatusInternalServerError
	js.mu.Unlock()
	_, err := New(t.Context(), Config{Enabled: true, Algorithm: AlgRS256, JWKSURL: js.srv.URL + "/jwks?token=hidden"})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if strings.Contains(err.Error(), "hidden") {
		t.Fatalf("error shows the URL's query: %v", err)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = New(t.Context(), Config{Enabled: true, Algorithm: AlgRS256, JWKSURL: closed.URL, JWKSTimeout: time.Second})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("unreachable: err = %v, want ErrInvalidConfig", err)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	t.Parallel()
	k := keysOnce()
	js := newJWKSServer(t, rsaJWK("k1", k.rsa))
	v, err := New(context.Background(), Config{Enabled: true, Algorithm: AlgRS256, JWKSURL: js.srv.URL,
		JWKSRefreshInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	v.Close()
	v.Close()
	// The keys fetched so far keep working after Close.
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "k1")); err != nil {
		t.Fatalf("Verify after Close: %v", err)
	}
}

// FuzzVerify: no input panics, and every failure is one of the sentinels
// with a message that does not contain the input.
func FuzzVerify(f *testing.F) {
	k := keysOnce()
	good := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	s, err := good.SignedString([]byte(k.secret))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s)
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	crit := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil))
	crit.Header["crit"] = []string{"exp"}
	if s, err = crit.SignedString([]byte(k.secret)); err != nil {
		f.Fatal(err)
	}
	f.Add(s)
	future := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(jwt.MapClaims{"iat": time.Now().Add(time.Hour).Unix()}))
	if s, err = future.SignedString([]byte(k.secret)); err != nil {
		f.Fatal(err)
	}
	f.Add(s)
	v, err := New(context.Background(), Config{Enabled: true, Algorithm: AlgAuto, Secret: k.secret, PublicKeyPEM: k.edPEM})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		_, err := v.Verify(tok)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrInvalidToken) && !errors.Is(err, ErrMissingToken) {
			t.Fatalf("err = %v", err)
		}
		if len(tok) > 70 && strings.Contains(err.Error(), tok) {
			t.Fatalf("error echoes the token: %v", err)
		}
	})
}
