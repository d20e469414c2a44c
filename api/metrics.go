package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/store"
)

type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	authFailures *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpubroker_api_requests_total",
			Help: "API requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpubroker_api_request_duration_seconds",
			Help:    "API request latency by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpubroker_api_auth_failures_total",
			Help: "Requests refused for a missing or invalid token.",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.authFailures} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register api metrics: a registry serves one API handler: %w", err)
			}
			return nil, fmt.Errorf("register api metrics: %w", err)
		}
	}
	return m, nil
}

// loggingWriter records the status and the authenticated token (its id and
// name only) for the request log.
type loggingWriter struct {
	statusWriter
	token store.Token
}

// instrument logs one line per request and records metrics by route
// pattern. It never logs headers: the Authorization header holds a secret.
func (s *server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lw := &loggingWriter{statusWriter: statusWriter{ResponseWriter: w}}
		next.ServeHTTP(lw, r)
		if lw.status == 0 {
			lw.status = http.StatusOK
		}
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		d := time.Since(start)
		s.metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(lw.status)).Inc()
		s.metrics.duration.WithLabelValues(route, r.Method).Observe(d.Seconds())
		level := s.log.DebugContext
		if r.Method != http.MethodGet || lw.status >= 500 {
			level = s.log.InfoContext
		}
		level(r.Context(), "api request", "method", r.Method, "route", route, "path", redactTokens(r.URL.Path),
			"status", lw.status, "duration_ms", d.Milliseconds(),
			"token_id", lw.token.ID, "token_name", lw.token.Name, "role", string(lw.token.Role))
	})
}

// recoverer turns a panic in a handler into a 500 and a log line.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "handler panic", "path", redactTokens(r.URL.Path), "panic", fmt.Sprint(v))
				writeErr(w, http.StatusInternalServerError, "internal", "", "internal error; see the broker's log")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
