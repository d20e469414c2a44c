package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpubroker/gpubroker/api"
)

// TestReadModelOutlivesTheClientThatAsked: the request that computes a
// generation's answer may go away (wrk closing its connections, a
// dashboard tab closed); the answer every later request gets is still the
// whole one, not the nothing a canceled store read left (it was kept as an
// empty 200 for the generation).
func TestReadModelOutlivesTheClientThatAsked(t *testing.T) {
	e := newEnv(t)
	e.seed()
	h, err := api.New(api.Config{Store: e.st, Runtime: e.rt, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), ReadModel: api.NewReadModel(api.ReadModelConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context, path string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", path, nil).WithContext(ctx)
		req.Header.Set("Authorization", "Bearer "+e.tokens["viewer"])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	// The token is checked once and cached, so a canceled request passes
	// authentication and reaches the read model.
	if w := get(context.Background(), "/api/v1/capacity"); w.Code != http.StatusOK {
		t.Fatalf("warm the token cache: %d %s", w.Code, w.Body.String())
	}
	for _, path := range []string{"/api/v1/nodes", "/api/v1/nodes?limit=2", "/api/v1/demand?limit=10"} {
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		get(gone, path) // computes the answer; its client is already gone
		w := get(context.Background(), path)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"items":[{`) {
			t.Errorf("%s after its first client went away: %d %q, want 200 with the items", path, w.Code, w.Body.String())
		}
	}
}
