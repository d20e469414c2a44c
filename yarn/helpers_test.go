package yarn_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/yarn"
)

// fileRM serves RM answers from testdata files: apps, nodes and scheduler,
// and extra files by path (app attempts and containers). Per-app paths
// without a file answer as the RM does for an app it does not know.
func fileRM(t *testing.T, apps, nodes, sched string, extra ...string) *httptest.Server {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := map[string][]byte{
		"/ws/v1/cluster/apps":      read(apps),
		"/ws/v1/cluster/nodes":     read(nodes),
		"/ws/v1/cluster/scheduler": read(sched),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		files[extra[i]] = read(extra[i+1])
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws/v1/cluster/apps" && r.URL.Query().Get("states") != "ACCEPTED,RUNNING" {
			t.Errorf("apps asked with states=%q, want ACCEPTED,RUNNING", r.URL.Query().Get("states"))
		}
		if r.URL.Query().Get("user.name") == "" {
			t.Errorf("%s asked without user.name", r.URL)
		}
		b, ok := files[r.URL.Path]
		if !ok && strings.HasPrefix(r.URL.Path, "/ws/v1/cluster/apps/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"RemoteException":{"exception":"NotFoundException","message":"java.lang.Exception: app with id: x not found","javaClassName":"org.apache.hadoop.yarn.webapp.NotFoundException"}}`))
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t *testing.T, cfg yarn.Config) *yarn.Client {
	t.Helper()
	c, err := yarn.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
