package api

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
)

// openAPIDoc is the OpenAPI 3 document of the routes; a test checks it
// against the router.
//
//go:embed openapi.json
var openAPIDoc []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}

// dashboardFS holds the dashboard: plain HTML, CSS and JavaScript with no
// build step and nothing fetched at run time.
//
//go:embed dashboard
var dashboardFS embed.FS

func dashboardHandler() (http.Handler, error) {
	sub, err := fs.Sub(dashboardFS, "dashboard")
	if err != nil {
		return nil, fmt.Errorf("dashboard assets: %w", err)
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}), nil
}
