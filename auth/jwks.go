package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// jwks holds a remote JSON Web Key Set, fetched and refreshed by
// github.com/MicahParks/jwkset and turned into verification keys by
// github.com/MicahParks/keyfunc.
//
// Two views share one key store: plain only reads it; refresh refetches the
// set once when a kid is missing. key picks refresh only when limiter allows
// (at most one unknown-kid refetch per Config.JWKSMinRefreshInterval), so a
// flood of tokens with made-up kids neither hammers the issuer nor blocks
// requests: the losers fail at once with errUnknownKID.
type jwks struct {
	ctx     context.Context
	client  *http.Client
	store   jwkset.Storage // refreshed every Config.JWKSRefreshInterval
	plain   keyfunc.Keyfunc
	refresh keyfunc.Keyfunc
	limiter *rate.Limiter
}

// newJWKS fetches cfg.JWKSURL (an error if that fails) and starts the
// periodic refresh, which runs until ctx ends.
func newJWKS(ctx context.Context, cfg Config) (*jwks, error) {
	client := cfg.HTTPClient
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		client = &http.Client{Timeout: cfg.JWKSTimeout, Transport: tr}
	}
	where := redactURL(cfg.JWKSURL)
	log := cfg.Logger
	store, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:          client,
		Ctx:             ctx,
		HTTPTimeout:     cfg.JWKSTimeout,
		RefreshInterval: cfg.JWKSRefreshInterval,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			log.WarnContext(ctx, "auth: JWKS refresh failed; keeping the previous keys", "url", where, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: JWT_JWKS_URL: first fetch of %s: %v", ErrInvalidConfig, where, err)
	}
	refreshing, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:         map[string]jwkset.Storage{cfg.JWKSURL: store},
		RateLimitWaitMax: cfg.JWKSTimeout, // bounds the refetch; the limiter below never waits
		// Always allowed here: the rate limit is j.limiter, checked without waiting.
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS client: %w", err)
	}
	use := []jwkset.USE{jwkset.UseSig, ""}
	plain, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: store, UseWhitelist: use})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS keyfunc: %w", err)
	}
	refresh, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: refreshing, UseWhitelist: use})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS keyfunc: %w", err)
	}
	return &jwks{
		ctx:     ctx,
		client:  client,
		store:   store,
		plain:   plain,
		refresh: refresh,
		limiter: rate.NewLimiter(rate.Every(cfg.JWKSMinRefreshInterval), 1),
	}, nil
}

// key returns the JWKS key for t: the key of t's kid, or, without a kid, every
// key of the set. Only keys of the kind t's algorithm needs are returned
// (RSA for RS256, Ed25519 for EdDSA); a JWK whose "alg" differs from t's is
// refused by keyfunc.
func (j *jwks) key(t *jwt.Token) (any, error) {
	kf := j.plain
	if kid, ok := t.Header["kid"].(string); ok {
		_, err := j.store.KeyRead(j.ctx, kid)
		if errors.Is(err, jwkset.ErrKeyNotFound) && j.limiter.Allow() {
			kf = j.refresh
		}
	}
	k, err := kf.Keyfunc(t)
	if errors.Is(err, jwkset.ErrKeyNotFound) {
		return nil, errUnknownKID
	}
	if err != nil {
		return nil, err
	}
	if set, ok := k.(jwt.VerificationKeySet); ok {
		var fit jwt.VerificationKeySet
		for _, key := range set.Keys {
			if keyFits(key, t.Method) {
				fit.Keys = append(fit.Keys, key)
			}
		}
		if len(fit.Keys) == 0 {
			return nil, errNoKey
		}
		return fit, nil
	}
	if !keyFits(k, t.Method) {
		return nil, errNoKey
	}
	return k, nil
}

// keyFits reports whether key is the kind of public key m verifies with.
func keyFits(key any, m jwt.SigningMethod) bool {
	switch m {
	case jwt.SigningMethodRS256:
		_, ok := key.(*rsa.PublicKey)
		return ok
	case jwt.SigningMethodEdDSA:
		_, ok := key.(ed25519.PublicKey)
		return ok
	}
	return false
}

// redactURL drops credentials, query and fragment from u for logs and errors.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "<unparsable URL>"
	}
	p.User, p.RawQuery, p.Fragment = nil, "", ""
	return p.String()
}
