package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/api"
)

// unreachableStore is an api.Store whose database does not answer; only
// the methods /readyz calls are reached.
type unreachableStore struct{ api.Store }

func (unreachableStore) Ping(context.Context) error {
	return errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

// TestReadyzOnStoreInterface: the API runs on any api.Store, not only
// *store.Store; a database that does not answer makes /readyz 503 with
// the reason.
func TestReadyzOnStoreInterface(t *testing.T) {
	h, err := api.New(api.Config{Store: unreachableStore{}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "unreachable") ||
		!strings.Contains(rec.Body.String(), "connection refused") {
		t.Fatalf("readyz: %d %s", rec.Code, rec.Body.String())
	}
}
