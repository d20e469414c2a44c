package yarn_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
)

// TestStreamedAnswerLimit checks max_response_bytes on the answers the
// client decodes as they stream in: an apps answer of exactly the limit is
// read, one byte more is refused with the error that names the setting,
// whether the RM sends it chunked (no length, as Jetty does for large
// answers) or with a Content-Length.
func TestStreamedAnswerLimit(t *testing.T) {
	_, sim := newSim(t)
	var apps strings.Builder
	apps.WriteString(`{"apps":{"app":[`)
	for i := range 2000 {
		if i > 0 {
			apps.WriteByte(',')
		}
		fmt.Fprintf(&apps, `{"id":"application_1_%04d","state":"ACCEPTED","queue":"a","resourceRequests":[{"resourceName":"*","numContainers":1,"capability":{"memory":1,"vCores":1,"resourceInformations":{"resourceInformation":[{"name":"yarn.io/gpu","value":2}]}}}]}`, i)
	}
	apps.WriteString(`]}}`)
	body := apps.String()
	for _, chunked := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/ws/v1/cluster/apps" {
				http.Redirect(w, r, sim.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if !chunked {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			}
			for i := 0; i < len(body); i += 4096 {
				_, _ = w.Write([]byte(body[i:min(i+4096, len(body))]))
				if chunked {
					w.(http.Flusher).Flush()
				}
			}
		}))
		obs, err := newClient(t, yarn.Config{RMs: []string{srv.URL}, MaxResponseBytes: int64(len(body))}).Observe(context.Background())
		if err != nil || len(obs.Apps) != 2000 || obs.PendingGPUs() != 4000 {
			t.Fatalf("chunked %v, limit = answer: err %v, want 2000 apps asking 4000 GPUs", chunked, err)
		}
		_, err = newClient(t, yarn.Config{RMs: []string{srv.URL}, MaxResponseBytes: int64(len(body) - 1)}).Observe(context.Background())
		if want := fmt.Sprintf("exceeds %d bytes (raise max_response_bytes)", len(body)-1); !errors.Is(err, broker.ErrStale) || !contains(err.Error(), want) {
			t.Errorf("chunked %v, limit one byte short: err = %v, want %q", chunked, err, want)
		}
		srv.Close()
	}
}
