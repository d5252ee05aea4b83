// Package console is the broker's web console: a single page (HTML, vanilla
// JavaScript modules, CSS, and uPlot vendored for the charts) embedded in
// the binary and served by the broker's HTTP server under a path prefix
// (QUEEN_CONSOLE_PATH, default "/").
//
// The charts are drawn by uPlot 1.6.32 (MIT; its licence is
// static/assets/vendor/uplot/LICENSE.txt, served beside it), copied
// unchanged from the dist/ folder of its npm package; nothing is built.
//
// The page fetches nothing from outside the broker: every file it loads is
// one of the embedded files below, and every answer carries a
// Content-Security-Policy that allows only the broker's own origin
// ('self'), so a browser refuses any other fetch. The data comes from the
// broker's HTTP API (docs/console.md lists which route feeds which figure).
//
// The files are public: they hold no data, and the API calls the page makes
// carry the operator's token (Authorization: Bearer) and are checked by the
// auth middleware as any other client's. Handler.Wrap therefore sits in
// front of authentication, and answers only GET and HEAD requests for the
// exact paths of embedded files; every other request goes to the wrapped
// handler unchanged.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/valyala/fasthttp"
)

// DefaultPath is the console's path prefix when Config.Path is empty.
const DefaultPath = "/"

// ContentSecurityPolicy is sent with every console file: scripts, styles,
// images, fonts and fetches from the broker's own origin only; no inline
// script, no frames, no form posts, no <base>.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ErrBadPath is returned (wrapped with the reason) by New for a path prefix
// that is not absolute, contains "." or ".." segments or characters other
// than letters, digits and "-._~/", or lies under a path the broker serves
// itself (/api/, /health, /metrics, /debug/).
var ErrBadPath = errors.New("console: bad path prefix")

// reserved are the prefixes of the broker's own routes; the console may
// not be mounted at or under them.
var reserved = []string{"/api", "/health", "/metrics", "/debug"}

//go:embed static
var static embed.FS

// Config of the console. The zero value serves it at DefaultPath.
type Config struct {
	// Disabled turns the console off (QUEEN_CONSOLE=false): no file is
	// served and "/" answers the API's 404.
	Disabled bool
	// Path is the URL path prefix (QUEEN_CONSOLE_PATH), e.g. "/" or
	// "/console/". A missing trailing slash is added; "" means DefaultPath.
	Path string
}

// file is one embedded file ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the embedded files under a prefix. Build it with New.
type Handler struct {
	prefix string           // always ends in "/"
	files  map[string]*file // by request path
}

// NormalizePath checks a path prefix and returns it with one trailing
// slash. Errors wrap ErrBadPath with the reason (without the value).
func NormalizePath(p string) (string, error) {
	if p == "" {
		return DefaultPath, nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: must start with /", ErrBadPath)
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~/", r)) {
			return "", fmt.Errorf("%w: only letters, digits and -._~/ are allowed", ErrBadPath)
		}
	}
	p = strings.TrimRight(p, "/") + "/"
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "." || seg == ".." || (seg == "" && p != "/") {
			return "", fmt.Errorf("%w: an empty, . or .. segment", ErrBadPath)
		}
	}
	for _, r := range reserved {
		if p == r+"/" || strings.HasPrefix(p, r+"/") {
			return "", fmt.Errorf("%w: it is under %s, which the broker serves itself", ErrBadPath, r)
		}
	}
	return p, nil
}

// New returns a Handler for cfg, or nil (and no error) when cfg.Disabled.
// Errors wrap ErrBadPath.
func New(cfg Config) (*Handler, error) {
	if cfg.Disabled {
		return nil, nil
	}
	prefix, err := NormalizePath(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", cfg.Path, err)
	}
	h := &Handler{prefix: prefix, files: map[string]*file{}}
	root, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(name))
		switch path.Ext(name) { // not left to the host's mime tables
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		case ".txt":
			ct = "text/plain; charset=utf-8"
		}
		h.files[prefix+name] = &file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: read embedded files: %w", err)
	}
	index := h.files[prefix+"index.html"]
	if index == nil {
		return nil, errors.New("console: index.html is not embedded")
	}
	h.files[prefix] = index
	return h, nil
}

// Prefix is the path prefix the console is served under, ending in "/".
func (h *Handler) Prefix() string { return h.prefix }

// Wrap returns a handler that answers GET and HEAD for the console's files
// (the prefix itself is index.html; the prefix without its trailing slash
// is redirected to it with 301) and passes every other request to next.
// A nil Handler returns next.
func (h *Handler) Wrap(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if h == nil {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsGet() && !ctx.IsHead() {
			next(ctx)
			return
		}
		p := string(ctx.Path())
		if h.prefix != "/" && p == strings.TrimSuffix(h.prefix, "/") {
			ctx.Redirect(h.prefix, fasthttp.StatusMovedPermanently)
			return
		}
		f := h.files[p]
		if f == nil {
			next(ctx)
			return
		}
		h.serve(ctx, f)
	}
}

func (h *Handler) serve(ctx *fasthttp.RequestCtx, f *file) {
	hd := &ctx.Response.Header
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	// Revalidate every load, so a new broker version's files are used at
	// once; the ETag makes that a 304 when nothing changed.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if inm := ctx.Request.Header.Peek("If-None-Match"); len(inm) > 0 && string(inm) == f.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentType(f.contentType)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(f.body) // fasthttp sends no body to a HEAD, with its Content-Length

}
