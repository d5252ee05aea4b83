//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package fastapi

import "github.com/valyala/fasthttp"

// clientGone cannot tell on this platform; see clientgone_unix.go.
func clientGone(*fasthttp.RequestCtx) bool { return false }
