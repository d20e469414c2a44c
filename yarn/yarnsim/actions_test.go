package yarnsim_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpubroker/gpubroker/broker"
	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

func TestActionsDecommissionAndRecommission(t *testing.T) {
	ctx := context.Background()
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()
	client, err := yarn.NewClient(yarn.Config{RMs: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	a := yarnsim.Actions{Sim: sim, Client: client}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "nm-1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	app, err := sim.Submit(yarnsim.AppSpec{Name: "train", Requests: []yarnsim.RequestSpec{{Containers: 1, GPUs: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	state := func() string {
		obs, err := client.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := obs.Node("nm-1")
		return n.State
	}
	st, err := a.Release(ctx, "nm-1", time.Now().Add(time.Minute))
	if err != nil || st.Drained || len(st.Remaining) != 1 || state() != "DECOMMISSIONING" {
		t.Fatalf("release with a running container: %+v %v, state %s", st, err, state())
	}
	// The container finishes: the next call completes the decommission.
	if err := a.Evict(ctx, "nm-1", broker.Workload{Source: broker.SourceYARN, Key: app + "/1"}); err != nil {
		t.Fatal(err)
	}
	st, err = a.Release(ctx, "nm-1", time.Now().Add(time.Minute))
	if err != nil || !st.Drained || state() != "DECOMMISSIONED" {
		t.Fatalf("release after the container finished: %+v %v, state %s", st, err, state())
	}
	// Idempotent.
	if st, err = a.Release(ctx, "nm-1", time.Now()); err != nil || !st.Drained {
		t.Fatalf("second release: %+v %v", st, err)
	}
	if err := a.Admit(ctx, "nm-1"); err != nil || state() != "RUNNING" {
		t.Fatalf("admit: %v, state %s", err, state())
	}
	if st, err := a.Release(ctx, "gone", time.Now()); err != nil || !st.Drained {
		t.Fatalf("a node YARN does not know is released: %+v %v", st, err)
	}
}
