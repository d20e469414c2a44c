package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/gpubroker/gpubroker/broker"
)

// maxPathParamLength bounds a path parameter ({name}, {id}): node names
// are at most 253 bytes, demand ids a little more.
const maxPathParamLength = 1024

// checkInput refuses, before any handler or the audit trail sees them,
// path and query parameters that PostgreSQL would reject as text (a NUL
// character, invalid UTF-8) or that are longer than any name the API
// knows: a 400 naming the parameter, never a 500 from the database. It
// runs after routing, so it knows the route's path parameters; JSON bodies
// are checked the same way by decode (nullField), and numbers against the
// bounds the OpenAPI document states by each handler.
func checkInput(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := badInput(r); err != nil {
			ve := err.(*broker.ValidationError)
			writeErr(w, http.StatusBadRequest, "invalid", ve.Field, ve.Problem)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// badInput returns the first bad path or query parameter as a validation
// error naming it.
func badInput(r *http.Request) error {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		for i, name := range rc.URLParams.Keys {
			if i >= len(rc.URLParams.Values) || name == "*" {
				continue
			}
			v := rc.URLParams.Values[i]
			if r.URL.RawPath != "" {
				// chi matched the escaped path: the handler unescapes.
				u, err := url.PathUnescape(v)
				if err != nil {
					return broker.Invalid(name, "is not a valid escaped path segment: %s", err.Error())
				}
				v = u
			}
			if err := badText(name, v, maxPathParamLength); err != nil {
				return err
			}
		}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return broker.Invalid("query", "is not a valid query string: %s", err.Error())
	}
	for name, vs := range q {
		if err := badText("query", name, maxParamLength); err != nil {
			return broker.Invalid(printable(name), "is not a valid query parameter name: %s", err.(*broker.ValidationError).Problem)
		}
		for _, v := range vs {
			if err := badText(name, v, maxCursorLength); err != nil {
				return err
			}
		}
	}
	return nil
}

// badText checks one value for what PostgreSQL's text type refuses.
func badText(field, v string, max int) error {
	switch {
	case strings.IndexByte(v, 0) >= 0:
		return broker.Invalid(field, "must not contain a NUL character (%%00)")
	case !utf8.ValidString(v):
		return broker.Invalid(field, "must be valid UTF-8")
	case len(v) > max:
		return broker.Invalid(field, "must be at most %d bytes long, got %d", max, len(v))
	}
	return nil
}

// printable makes a bad parameter name safe to name in an error.
func printable(s string) string {
	q := strconv.QuoteToASCII(s)
	q = q[1 : len(q)-1]
	if len(q) > 64 {
		q = q[:64]
	}
	return q
}
