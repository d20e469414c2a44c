package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
)

// BenchmarkReadModelHit is the server's own cost of a read the model
// already holds (authentication from its cache, routing, metrics, the
// cached answer), in process and without a network: what a faster answer
// path could save per request, against test/wrk's latencies.
func BenchmarkReadModelHit(b *testing.B) {
	e := newEnv(b)
	e.seed()
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), ReadModel: api.NewReadModel(api.ReadModelConfig{})})
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []string{"/api/v1/capacity", "/api/v1/demand?limit=100", "/api/v1/nodes"} {
		b.Run(path, func(b *testing.B) {
			req := httptest.NewRequest("GET", path, nil)
			req.Header.Set("Authorization", "Bearer "+e.tokens["viewer"])
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("GET %s: %d %s", path, w.Code, w.Body.String())
			}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(discard{header: http.Header{}}, req)
			}
		})
	}
}

// discard is a ResponseWriter that keeps nothing, so the figure is the
// server's work, not a copy of the body.
type discard struct{ header http.Header }

func (d discard) Header() http.Header         { return d.header }
func (d discard) Write(p []byte) (int, error) { return len(p), nil }
func (d discard) WriteHeader(int)             {}
