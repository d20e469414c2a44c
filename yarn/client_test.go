package yarn_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func newSim(t *testing.T) (*yarnsim.Sim, *httptest.Server) {
	t.Helper()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "gpu-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Submit(yarnsim.AppSpec{Queue: "a", Requests: []yarnsim.RequestSpec{{Containers: 3, GPUs: 2}}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	return sim, srv
}

// deadAddress returns an http address on which nothing listens.
func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

type counter struct {
	n atomic.Int64
	h http.Handler
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.h.ServeHTTP(w, r)
}

func TestHAFailoverAndStandbyRedirect(t *testing.T) {
	_, active := newSim(t)
	standby := &counter{h: yarnsim.StandbyHandler(func() string { return active.URL })}
	standbySrv := httptest.NewServer(standby)
	defer standbySrv.Close()
	dead := deadAddress(t)

	c := newClient(t, yarn.Config{RMs: []string{dead, standbySrv.URL, active.URL}, Timeout: 2 * time.Second})
	obs, err := c.Observe(context.Background())
	if err != nil {
		t.Fatalf("observe through a dead and a standby RM: %v", err)
	}
	if obs.RM != active.URL {
		t.Errorf("observation from %q, want the active RM %q", obs.RM, active.URL)
	}
	if obs.PendingGPUs() != 2 || len(obs.Nodes) != 1 {
		t.Errorf("pending GPUs %d nodes %d, want 2 and 1", obs.PendingGPUs(), len(obs.Nodes))
	}
	// The active RM is remembered: the standby is not asked again.
	before := standby.n.Load()
	if _, err := c.Observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if standby.n.Load() != before {
		t.Errorf("standby asked %d more times after the active RM was known", standby.n.Load()-before)
	}
}

func TestBadRMIsStaleAndNamed(t *testing.T) {
	for _, tc := range []struct {
		fault yarnsim.Fault
		want  string
	}{
		{yarnsim.FaultHTML, "HTML page Sign in"},
		{yarnsim.FaultTruncated, "truncated JSON"},
		{yarnsim.FaultServerError, "500 Internal Server Error"},
		{yarnsim.FaultStandbyNoRedirect, "without a redirect target"},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			sim, srv := newSim(t)
			sim.SetFault(tc.fault)
			c := newClient(t, yarn.Config{RMs: []string{srv.URL}})
			obs, err := c.Observe(context.Background())
			if err == nil {
				t.Fatalf("observe succeeded with %d apps; want an error", len(obs.Apps))
			}
			if obs != nil {
				t.Errorf("got an observation alongside the error")
			}
			if !errors.Is(err, broker.ErrStale) {
				t.Errorf("error does not wrap broker.ErrStale: %v", err)
			}
			if !contains(err.Error(), srv.URL, tc.want) {
				t.Errorf("error %q should name %s and say %q", err, srv.URL, tc.want)
			}
			// Cleared, the same client observes again.
			sim.SetFault(yarnsim.FaultNone)
			if _, err := c.Observe(context.Background()); err != nil {
				t.Errorf("after the fault cleared: %v", err)
			}
		})
	}
	t.Run("standby without active", func(t *testing.T) {
		srv := httptest.NewServer(yarnsim.StandbyHandler(func() string { return "" }))
		defer srv.Close()
		_, err := newClient(t, yarn.Config{RMs: []string{srv.URL}}).Observe(context.Background())
		if !errors.Is(err, broker.ErrStale) || !contains(err.Error(), srv.URL, "503") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("all RMs down", func(t *testing.T) {
		a, b := deadAddress(t), deadAddress(t)
		_, err := newClient(t, yarn.Config{RMs: []string{a, b}}).Observe(context.Background())
		if !errors.Is(err, broker.ErrStale) || !contains(err.Error(), a, b) {
			t.Errorf("err = %v, want both addresses and ErrStale", err)
		}
	})
}

func TestResponseCapAndTimeout(t *testing.T) {
	_, srv := newSim(t)
	_, err := newClient(t, yarn.Config{RMs: []string{srv.URL}, MaxResponseBytes: 200}).Observe(context.Background())
	if !errors.Is(err, broker.ErrStale) || !contains(err.Error(), "exceeds 200 bytes", srv.URL) {
		t.Errorf("capped: err = %v", err)
	}

	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	start := time.Now()
	_, err = newClient(t, yarn.Config{RMs: []string{slow.URL}, Timeout: 200 * time.Millisecond}).Observe(context.Background())
	if !errors.Is(err, broker.ErrStale) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow RM: err = %v, want a deadline error wrapped as stale", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("per-request timeout of 200ms took %s", el)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		rms   []string
		field string
	}{
		{nil, "rms"},
		{[]string{""}, "rms[0]"},
		{[]string{"ftp://rm:8088"}, "rms[0]"},
		{[]string{"rm1:8088", "http://rm1:8088/"}, "rms[1]"},
		{[]string{"http://rm:8088?x=1"}, "rms[0]"},
	} {
		_, err := yarn.NewClient(yarn.Config{RMs: tc.rms})
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("RMs %q: err = %v, want a validation error on %s", tc.rms, err, tc.field)
		}
	}
	c := newClient(t, yarn.Config{RMs: []string{"rm1:8088/", " https://rm2:8090 "}})
	if got := c.RMs(); got[0] != "http://rm1:8088" || got[1] != "https://rm2:8090" {
		t.Errorf("normalised RMs = %q", got)
	}
}
