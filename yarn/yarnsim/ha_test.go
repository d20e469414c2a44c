package yarnsim_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpubroker/gpubroker/yarn"
	"github.com/gpubroker/gpubroker/yarn/yarnsim"
)

// TestHAFailover: the standby of the pair answers Hadoop's redirect to the
// active RM, so the real client reaches the active one from either
// address; while no RM is active both answer 503 and the client fails;
// after a failover the other address is active.
func TestHAFailover(t *testing.T) {
	sim, err := yarnsim.New(yarnsim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddNode(yarnsim.NodeSpec{Host: "nm1", GPUs: 4}); err != nil {
		t.Fatal(err)
	}
	ha, err := sim.StartHA()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ha.Close(context.Background()) })
	urls := ha.URLs()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(urls[1] + "/ws/v1/cluster/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(resp.Header.Get("Location"), urls[0]+"/ws/v1/cluster/nodes") {
		t.Errorf("standby answered %d Location %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), urls[0])
	}
	// The client lists the standby first and is sent to the active RM.
	c, err := yarn.NewClient(yarn.Config{RMs: []string{urls[1], urls[0]}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := c.Observe(context.Background())
	if err != nil || len(obs.Nodes) != 1 {
		t.Fatalf("observe through the standby: %v, %d nodes", err, len(obs.Nodes))
	}
	if err := ha.SetActive(-1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Observe(context.Background()); err == nil {
		t.Error("observe with no active RM succeeded")
	}
	if err := ha.SetActive(1); err != nil {
		t.Fatal(err)
	}
	if ha.Active() != 1 || ha.Failovers() != 1 {
		t.Errorf("active %d after %d failovers, want 1 and 1", ha.Active(), ha.Failovers())
	}
	resp, err = noRedirect.Get(urls[0] + "/ws/v1/cluster/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(resp.Header.Get("Location"), urls[1]) {
		t.Errorf("old active answered %d Location %q, want a redirect to %s", resp.StatusCode, resp.Header.Get("Location"), urls[1])
	}
	if _, err := c.Observe(context.Background()); err != nil {
		t.Errorf("observe after the failover: %v", err)
	}
	if got := sim.NodeGPUs("nm1"); got != 4 {
		t.Errorf("NodeGPUs(nm1) = %d, want 4", got)
	}
	if got := sim.NodeGPUs("absent"); got != 0 {
		t.Errorf("NodeGPUs(absent) = %d, want 0", got)
	}
}
